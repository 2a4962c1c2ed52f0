"""The one gate on an action without money: each origin, decision and execution asks the same rights.

A rename of a board to an "official" title needs staff after the owner. An approval whose approver may
no longer approve lapses at execution and the preview waits for staff again; nothing is renamed on it.
"""

import pytest

from approvals.core.errors import DecisionError
from approvals.core.services import preview_approve, preview_execute
from approvals.models import (
    Approval,
    ApprovalRole,
    AuditEvent,
    AuditRecord,
    Execution,
    ExecutionOutcome,
    PreviewOrigin,
    PreviewStatus,
)
from tests.toy_action.models import Board

from .conftest import make_reviewer, proposed

OFFICIAL = "Official roadmap"


def confirm(preview):
    return preview_approve(
        preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest
    )


def staff_approve(preview, person):
    return preview_approve(preview_id=preview.pk, approver=person, role=ApprovalRole.STAFF, digest=preview.digest)


def test_an_agents_proposal_records_its_origin_and_proposer(agent, board, owner):
    preview = proposed(agent, title=OFFICIAL)
    assert (preview.origin, preview.proposed_by_id, preview.chain_root_id) == (PreviewOrigin.AGENT, owner.pk, None)
    record = AuditRecord.objects.get(preview=preview, event=AuditEvent.PROPOSED)
    assert record.actor_id == owner.pk and "origin" not in record.result  # an agent's: nothing more to say
    assert preview.amount_minor is None and preview.currency is None


def test_a_reviewer_who_left_the_group_before_the_worker_ran_sends_the_rename_back_to_staff(
    agent, board, django_capture_on_commit_callbacks
):
    preview = confirm(proposed(agent, title=OFFICIAL))
    assert preview.status == PreviewStatus.AWAITING_STAFF
    rosa = make_reviewer("rosa")
    with django_capture_on_commit_callbacks(execute=False):
        staff_approve(preview, rosa)
    rosa.groups.clear()

    preview_execute(preview_id=preview.pk)

    preview.refresh_from_db()
    board.refresh_from_db()
    assert board.title == "Roadmap"  # nothing renamed
    assert preview.status == PreviewStatus.AWAITING_STAFF and preview.failure_code == "approval_lapsed"
    assert Execution.objects.get(pk=preview.pk).outcome == ExecutionOutcome.AWAITING_APPROVAL
    assert AuditRecord.objects.get(preview=preview, event=AuditEvent.APPROVAL_LAPSED).result["approver"] == "rosa"

    # She may not approve again while she is no reviewer (a request reads her afresh); another reviewer's
    # approval executes it.
    with pytest.raises(DecisionError) as refused:
        staff_approve(preview, type(rosa).objects.get(pk=rosa.pk))
    assert refused.value.code == "not_a_reviewer"
    with django_capture_on_commit_callbacks(execute=True):
        staff_approve(preview, make_reviewer("remy"))
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert Board.objects.get(pk=board.pk).title == OFFICIAL
    executed = AuditRecord.objects.get(preview=preview, event=AuditEvent.EXECUTED)
    assert [entry["approver"] for entry in executed.approval_basis["staff"]] == [
        Approval.objects.get(preview=preview, lapsed_at__isnull=True, role="staff").approver_id
    ]


def test_a_reviewer_back_in_the_group_approves_anew_after_a_lapse(agent, board, django_capture_on_commit_callbacks):
    preview = confirm(proposed(agent, title=OFFICIAL))
    rosa = make_reviewer("rosa")
    with django_capture_on_commit_callbacks(execute=False):
        staff_approve(preview, rosa)
    group = rosa.groups.get()
    rosa.groups.clear()
    preview_execute(preview_id=preview.pk)
    rosa.groups.add(group)

    with django_capture_on_commit_callbacks(execute=True):
        staff_approve(preview, type(rosa).objects.get(pk=rosa.pk))
    assert Board.objects.get(pk=board.pk).title == OFFICIAL
    assert Approval.objects.filter(preview=preview, approver=rosa).count() == 2  # the lapsed one is kept
