"""Defects found while trying the execution issue as a support agent would."""

from approvals.core.services import agent_session_create
from approvals.models import AgentSession
from refunds.actions import RefundOrderAction
from tests.approvals.test_preview_execute import approve_held, make_preview
from tests.conftest import agent_client_for

from .conftest import logged_in


def test_the_console_revokes_the_session_it_shows_not_every_session_sharing_its_prefix(alice, reviewer):
    first, _ = agent_session_create(user=alice, tools=["refund_order"])
    second, _ = agent_session_create(user=alice, tools=["refund_order"])
    AgentSession.objects.filter(pk__in=[first.pk, second.pk]).update(token_prefix="agt_samepref")

    response = logged_in(reviewer).post(f"/console/agent-sessions/{first.pk}/revoke")

    assert response.status_code == 302
    assert AgentSession.objects.get(pk=first.pk).revoked_at is not None
    assert AgentSession.objects.get(pk=second.pk).revoked_at is None


def test_an_executed_refund_does_not_count_its_own_amount_twice(alice, o12, django_capture_on_commit_callbacks):
    from approvals.core.services import preview_execute

    preview = make_preview(agent_client_for(alice), amount_minor=500)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    before = {row.label: row.value for row in RefundOrderAction().review_facts(preview)}
    assert before["Remaining after this refund"] == "€5.00"

    executed = preview_execute(preview_id=preview.pk)

    facts = {row.label: row.value for row in RefundOrderAction().review_facts(executed)}
    assert facts["Remaining refundable"] == "€5.00"
    assert facts["Remaining after this refund (made)"] == "€5.00"
    assert "too much" not in " ".join(facts.values())
