"""Every step of a rename is audited with who did it and through which agent session, and the console
reads the trail back as sentences."""

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditRecord

from .conftest import html, logged_in, proposed, rename


def test_every_step_is_audited_with_its_actor_and_session(
    board, owner, agent, reviewer, django_capture_on_commit_callbacks
):
    rename(agent, title="Roadmap")  # refused: the title is unchanged
    preview = proposed(agent, title="Official roadmap")
    rename(agent, title="Official roadmap")  # the same pending proposal again
    preview_approve(preview_id=preview.pk, approver=owner, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    with django_capture_on_commit_callbacks(execute=True):
        response = logged_in(reviewer).post(f"/console/previews/{preview.pk}/approve", {"digest": preview.digest})
    assert response.status_code == 302

    records = list(
        AuditRecord.objects.exclude(event="agent_session_created")
        .order_by("id")
        .values_list("event", "actor__username", "agent_session", "preview", "action", "subject_type", "subject_id")
    )
    session = agent.agent_session.pk
    assert records == [
        ("proposal_refused", "olive", session, None, "rename_board", "", "b-1"),
        ("proposed", "olive", session, preview.pk, "rename_board", "board", "b-1"),
        ("proposal_repeated", "olive", session, preview.pk, "rename_board", "board", "b-1"),
        ("confirmed", "olive", None, preview.pk, "rename_board", "board", "b-1"),
        ("approved", "rhea", None, preview.pk, "rename_board", "board", "b-1"),
        ("execution_started", None, None, preview.pk, "rename_board", "board", "b-1"),
        ("executed", None, None, preview.pk, "rename_board", "board", "b-1"),
    ]
    created = AuditRecord.objects.get(event="agent_session_created")
    assert (created.actor, created.agent_session_id) == (owner, session)
    confirmed = AuditRecord.objects.get(event="confirmed")
    assert confirmed.approval_basis == {"role": "customer", "digest": preview.digest, "basis": "", "subject_version": 1}
    refused = AuditRecord.objects.get(event="proposal_refused")
    assert refused.raw_arguments == '{"board_id":"b-1","title":"Roadmap"}'  # the text as the client sent it
    assert refused.result["error"]["code"] == "title_unchanged"


def test_the_console_reads_the_trail_back_as_sentences(
    board, owner, agent, reviewer, django_capture_on_commit_callbacks
):
    preview = proposed(agent, title="Official roadmap")
    preview_approve(preview_id=preview.pk, approver=owner, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    with django_capture_on_commit_callbacks(execute=True):
        logged_in(reviewer).post(f"/console/previews/{preview.pk}/approve", {"digest": preview.digest})

    response = logged_in(reviewer).get(f"/console/previews/{preview.pk}/audit/")

    assert response.status_code == 200
    page = html(response)
    assert "rhea approved it as staff" in page
    assert "olive" in page
    for event in ("proposed", "confirmed", "approved", "executed"):
        assert event in page
