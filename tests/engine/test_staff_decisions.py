"""Staff decide renames that need them in the console, with the action's own review permission:
the owner first, then staff; four eyes; a rejection with a note; staff without the permission."""

from django.contrib.auth.models import Group, Permission

from approvals.core.services import preview_approve
from approvals.models import Approval, ApprovalRole, AuditRecord, Execution, PreviewStatus
from tests.conftest import agent_client_for, execution_callbacks
from tests.toy_action.models import Board

from .conftest import TOOL, events, html, logged_in, make_reviewer, proposed
from .factories import BoardFactory, StaffPersonFactory

STAFF_TITLE = "Official roadmap"


def confirmed(preview):
    return preview_approve(
        preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest
    )


def approve(client, preview, digest=None):
    return client.post(f"/console/previews/{preview.pk}/approve", {"digest": digest or preview.digest})


def reject(client, preview, note):
    return client.post(f"/console/previews/{preview.pk}/reject", {"digest": preview.digest, "note": note})


def status_of(preview):
    preview.refresh_from_db()
    return preview.status


def test_the_owner_confirms_then_staff_approve_and_only_then_the_board_is_renamed(
    board, agent, reviewer, django_capture_on_commit_callbacks
):
    preview = proposed(agent, title=STAFF_TITLE)
    console = logged_in(reviewer)

    # Staff cannot go first: the owner has not confirmed this exact preview yet.
    assert approve(console, preview).status_code == 409
    assert status_of(preview) == PreviewStatus.AWAITING_CUSTOMER

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        confirmed(preview)
    assert execution_callbacks(callbacks) == []
    assert status_of(preview) == PreviewStatus.AWAITING_STAFF
    assert not Execution.objects.exists()
    assert Board.objects.get(pk="b-1").title == "Roadmap"
    assert agent.get(f"/api/agent/previews/{preview.pk}").json()["status"] == "awaiting_staff"

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = approve(console, preview)
    assert response.status_code == 302 and response["Location"] == f"/console/previews/{preview.pk}/"
    assert len(execution_callbacks(callbacks)) == 1

    assert status_of(preview) == PreviewStatus.EXECUTED
    board.refresh_from_db()
    assert (board.title, board.version) == (STAFF_TITLE, 2)
    assert sorted(Approval.objects.values_list("role", "approver__username")) == [
        ("customer", "olive"),
        ("staff", "rhea"),
    ]
    approved = AuditRecord.objects.get(preview=preview, event="approved")
    assert approved.actor == reviewer
    assert approved.approval_basis == {
        "role": "staff",
        "digest": preview.digest,
        "basis": "staff console review",
        "subject_version": 1,
    }
    assert events(preview)[:4] == ["proposed", "decision_refused", "confirmed", "approved"]


def test_four_eyes_a_reviewer_cannot_approve_their_own_rename(db, second_reviewer, django_capture_on_commit_callbacks):
    staff_owner = make_reviewer("stella")
    BoardFactory(id="b-7", owner=staff_owner, title="Team board")
    preview = proposed(agent_client_for(staff_owner, tools=(TOOL,)), board_id="b-7", title=STAFF_TITLE)
    confirmed(preview)
    own_console = logged_in(staff_owner)

    page = html(own_console.get(f"/console/previews/{preview.pk}/"))
    assert f"/console/previews/{preview.pk}/approve" not in page
    response = approve(own_console, preview)

    assert response.status_code == 409
    assert "another staff member must review it" in html(response)
    assert status_of(preview) == PreviewStatus.AWAITING_STAFF
    refused = AuditRecord.objects.get(preview=preview, event="decision_refused")
    assert (refused.actor, refused.result["error"]["code"]) == (staff_owner, "four_eyes")
    with django_capture_on_commit_callbacks(execute=True):
        assert approve(logged_in(second_reviewer), preview).status_code == 302
    assert status_of(preview) == PreviewStatus.EXECUTED
    assert Board.objects.get(pk="b-7").title == STAFF_TITLE


def test_a_rejection_with_a_note_ends_the_preview_and_the_agent_and_owner_read_it(
    board, owner, agent, reviewer, django_capture_on_commit_callbacks
):
    preview = proposed(agent, title=STAFF_TITLE)
    confirmed(preview)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = reject(logged_in(reviewer), preview, "Only the board's team may call it official.")

    assert response.status_code == 302
    assert execution_callbacks(callbacks) == []
    assert status_of(preview) == PreviewStatus.REJECTED
    rejected = AuditRecord.objects.get(preview=preview, event="rejected")
    assert (rejected.actor, rejected.result["note"]) == (reviewer, "Only the board's team may call it official.")
    body = agent.get(f"/api/agent/previews/{preview.pk}").json()
    assert (body["status"], body["executed"]) == ("rejected", False)
    assert body["preview"]["failure"]["reason"] == "Only the board's team may call it official."
    assert not Execution.objects.exists()
    board.refresh_from_db()
    assert (board.title, board.version) == ("Roadmap", 1)
    assert "Only the board" in html(logged_in(owner).get(f"/previews/{preview.pk}/"))


def test_staff_without_the_actions_review_permission_can_neither_see_nor_decide_it(board, agent, db):
    preview = proposed(agent, title=STAFF_TITLE)
    confirmed(preview)
    # The engine's generic permission (for previews of an action no longer installed) is not a board reviewer's.
    generic = StaffPersonFactory(username="gina")
    group, _ = Group.objects.get_or_create(name="Generic reviewers")
    group.permissions.add(Permission.objects.get(content_type__app_label="approvals", codename="review_preview"))
    generic.groups.add(group)
    plain_staff = StaffPersonFactory(username="pat")

    for person in (generic, plain_staff):
        console = logged_in(person)
        assert console.get(f"/console/previews/{preview.pk}/").status_code == 403
        assert approve(console, preview).status_code == 403
        assert reject(console, preview, "no").status_code == 403
        assert console.get("/console/").status_code == 403

    assert status_of(preview) == PreviewStatus.AWAITING_STAFF
    assert not Approval.objects.filter(role="staff").exists()
    assert not AuditRecord.objects.filter(actor__in=[generic, plain_staff]).exists()


def test_the_action_declares_its_staff_role_and_migrate_creates_it(db):
    from django.core.management import call_command

    from approvals.plugin import registry

    action = registry.action(TOOL)
    assert action.review_permission == "toy_action.review_rename_board"
    assert [(role.group, role.permissions) for role in action.staff_roles] == [
        ("Board reviewers", ("toy_action.review_rename_board", "approvals.export_auditrecord"))
    ]
    # The action has no data migration of its own: the engine creates its group after every migrate.
    Group.objects.filter(name="Board reviewers").delete()
    call_command("migrate", verbosity=0)
    group = Group.objects.get(name="Board reviewers")
    assert sorted(group.permissions.values_list("content_type__app_label", "codename")) == [
        ("approvals", "export_auditrecord"),
        ("toy_action", "review_rename_board"),
    ]
    reviewer = make_reviewer("rory")
    assert reviewer.has_perm(action.review_permission)
