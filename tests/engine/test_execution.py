"""Execution of an approved rename with eager Celery: the preview executed, the board changed once, the
execution succeeded, the audit in order; and what the executor does when the subject moved, the policy
no longer holds, a worker runs twice, or an earlier attempt's outcome is unknown."""

from approvals.core.services import executions_resolve_unknown, preview_approve, preview_execute
from approvals.models import ApprovalRole, AuditRecord, Execution, ExecutionOutcome, Preview, PreviewStatus
from tests.conftest import give_up_execution
from tests.toy_action.models import Board

from .conftest import events, proposed


def confirm(preview):
    return preview_approve(
        preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest
    )


def test_a_confirmed_rename_is_executed_once_and_every_step_is_recorded(
    board, owner, agent, django_capture_on_commit_callbacks
):
    preview = proposed(agent)

    with django_capture_on_commit_callbacks(execute=True):
        confirm(preview)

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert preview.executed_at is not None
    assert preview.result == {"board_id": "b-1", "title": "Plans for 2027", "previous_title": "Roadmap", "version": 2}
    board.refresh_from_db()
    assert (board.title, board.version) == ("Plans for 2027", 2)
    execution = Execution.objects.get()
    assert (execution.preview_id, execution.outcome, execution.attempt) == (preview.pk, "succeeded", 1)
    assert execution.effect == {"title": "Plans for 2027", "reference": f"rename_board:{preview.pk}"}
    assert (execution.lease_owner, execution.code) == ("", "")
    assert events(preview) == ["proposed", "confirmed", "execution_started", "executed"]
    executed = AuditRecord.objects.get(preview=preview, event="executed")
    assert (executed.result["outcome_from"], executed.result["outcome"]) == ("in_progress", "succeeded")
    assert executed.result["title"] == "Plans for 2027"
    assert executed.approval_basis == {"customer": [{"approver": owner.pk, "digest": preview.digest, "basis": ""}]}

    body = agent.get(f"/api/agent/previews/{preview.pk}").json()
    assert (body["ok"], body["executed"], body["status"], body["outcome"]) == (True, True, "executed", "succeeded")
    assert body["preview"]["result"] == preview.result
    assert body["message"] == "Board b-1 is now called “Plans for 2027”."


def test_running_the_execution_again_changes_nothing(board, agent, django_capture_on_commit_callbacks):
    preview = proposed(agent)
    with django_capture_on_commit_callbacks(execute=True):
        confirm(preview)

    again = preview_execute(preview_id=preview.pk)

    assert again.status == PreviewStatus.EXECUTED
    board.refresh_from_db()
    assert (board.title, board.version) == ("Plans for 2027", 2)
    assert Execution.objects.get().attempt == 1
    assert events(preview).count("executed") == 1


def test_a_board_changed_after_the_approval_is_not_renamed(board, agent, django_capture_on_commit_callbacks):
    preview = proposed(agent)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        confirm(preview)
    Board.objects.filter(pk="b-1").update(title="Changed meanwhile", version=2)

    for callback in callbacks:
        callback()

    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.SUPERSEDED, "subject_changed")
    # What the agent is told names what the preview is about, not an order or an invoice.
    assert "order" not in preview.failure_reason.lower() and "invoice" not in preview.failure_reason.lower()
    execution = Execution.objects.get()
    assert (execution.outcome, execution.code) == ("refused_before_effect", "subject_changed")
    assert execution.effect is None
    board.refresh_from_db()
    assert (board.title, board.version) == ("Changed meanwhile", 2)
    assert events(preview)[-1] == "superseded"


def test_the_policy_runs_again_before_the_effect(board, agent, django_capture_on_commit_callbacks):
    preview = proposed(agent)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        confirm(preview)
    Board.objects.filter(pk="b-1").update(archived=True)  # no version change: only the policy sees it

    for callback in callbacks:
        callback()

    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.FAILED, "board_archived")
    assert "archived" in preview.failure_reason
    assert Execution.objects.get().outcome == "refused_before_effect"
    assert Board.objects.get(pk="b-1").title == "Roadmap"
    body = agent.get(f"/api/agent/previews/{preview.pk}").json()
    assert (body["status"], body["executed"], body["outcome"]) == ("failed", False, "refused_before_effect")
    assert body["preview"]["failure"]["code"] == "board_archived"


def test_a_completed_rename_supersedes_the_other_open_previews_of_the_board(
    board, agent, django_capture_on_commit_callbacks
):
    first = proposed(agent, title="First title")
    second = proposed(agent, title="Second title")

    with django_capture_on_commit_callbacks(execute=True):
        confirm(first)

    second.refresh_from_db()
    assert second.status == PreviewStatus.SUPERSEDED
    assert Board.objects.get(pk="b-1").title == "First title"
    body = agent.get(f"/api/agent/previews/{second.pk}").json()
    assert (body["status"], body["executed"]) == ("superseded", False)


def test_an_unknown_outcome_is_resolved_by_looking_up_then_making_the_effect_once(
    board, agent, django_capture_on_commit_callbacks
):
    """No outside world: `find_effect` truthfully says nothing was made until it was recorded, so the
    resolver finishes an attempt that died rather than leaving it to a person."""
    preview = proposed(agent)
    with django_capture_on_commit_callbacks(execute=False):
        confirm(preview)
    give_up_execution(Preview.objects.get(pk=preview.pk), effect_possible=True)
    assert Execution.objects.get().outcome == ExecutionOutcome.EFFECT_UNKNOWN
    assert Board.objects.get(pk="b-1").title == "Roadmap"

    assert executions_resolve_unknown(older_than_seconds=0) == 1  # eager Celery: the attempt runs now

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    execution = Execution.objects.get()
    assert (execution.outcome, execution.attempt) == ("succeeded", 2)
    board.refresh_from_db()
    assert (board.title, board.version) == ("Plans for 2027", 2)
    started = AuditRecord.objects.filter(preview=preview, event="execution_started").order_by("id").last()
    assert started.result["look_up_first"] is True
