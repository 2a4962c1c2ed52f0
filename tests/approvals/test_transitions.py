"""Every preview status change reaches the transition listeners once its transaction commits."""

import pytest

from approvals.core import transitions
from approvals.core.services import preview_approve, preview_decline, preview_execute
from approvals.models import ApprovalRole, Preview
from tests.approvals.test_preview_execute import make_preview, propose


@pytest.fixture
def heard(monkeypatch):
    seen = []
    monkeypatch.setattr(transitions, "_listeners", [lambda pid, old, new: seen.append((pid, old, new))])
    return seen


def test_a_refund_is_heard_from_proposal_to_execution(
    alice, o12, alice_agent, heard, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        preview = make_preview(alice_agent)
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
        preview_execute(preview_id=preview.pk)
    pid = str(preview.pk)
    assert heard == [
        (pid, "", "awaiting_customer"),
        (pid, "awaiting_customer", "approved"),
        (pid, "approved", "executed"),
    ]


def test_a_decline_is_heard_only_once_its_transaction_committed(
    alice, o12, alice_agent, heard, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        preview = make_preview(alice_agent)
    with django_capture_on_commit_callbacks(execute=False) as pending:
        preview_decline(preview_id=preview.pk, person=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    assert heard == [(str(preview.pk), "", "awaiting_customer")]  # not before the commit
    for callback in pending:
        callback()
    assert heard[-1] == (str(preview.pk), "awaiting_customer", "declined")


def test_a_listener_not_interested_in_a_preview_queues_nothing_for_it(
    alice, o12, alice_agent, monkeypatch, django_capture_on_commit_callbacks
):
    seen = []

    def listener(pid, old, new):
        seen.append((pid, old, new))

    monkeypatch.setattr(transitions, "_listeners", [])
    monkeypatch.setattr(transitions, "_interests", {})
    transitions.on_preview_transition(listener, interested=lambda preview: preview.subject_id != o12.number)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        preview = make_preview(alice_agent)
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)

    assert seen == []
    assert not [callback for callback in callbacks if getattr(callback, "is_transition_notice", False)]


def test_the_webhook_listener_is_not_queued_for_a_session_read_without_a_webhook(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    from approvals.agents.webhooks import preview_transition_webhook

    assert preview_transition_webhook in transitions._listeners
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = propose(alice_agent, order_id=o12.number, amount_minor=500, reason="damaged")
    assert response.status_code == 201
    # The proposal holds its session, which has no webhook URL: nothing is queued to ask.
    assert not [callback for callback in callbacks if getattr(callback, "is_transition_notice", False)]
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)

    # The confirmation read with the preview that its session has no webhook URL: nothing is queued to ask.
    assert not [callback for callback in callbacks if getattr(callback, "is_transition_notice", False)]
