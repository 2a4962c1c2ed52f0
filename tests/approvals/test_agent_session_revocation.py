from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from approvals.models import AgentSession, AuditRecord
from tests.conftest import agent_client_for
from tests.factories import StaffFactory


def test_revoking_by_token_prefix_stops_the_agent_at_once_and_is_audited(alice):
    client = agent_client_for(alice)
    assert client.get("/api/agent/tools").status_code == 200
    out = StringIO()
    call_command("revoke_agent_session", "--token-prefix", client.token[:12], stdout=out)
    assert "Revoked 1 agent session" in out.getvalue()
    response = client.get("/api/agent/tools")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "This agent session was revoked."
    assert AuditRecord.objects.filter(event="agent_session_revoked", agent_session=client.agent_session).count() == 1


def test_revoking_every_session_of_a_user_leaves_others_alone(alice, bob):
    first, second, bobs = agent_client_for(alice), agent_client_for(alice), agent_client_for(bob)
    call_command("revoke_agent_session", "--user", "alice", stdout=StringIO())
    assert first.get("/api/agent/tools").status_code == 401
    assert second.get("/api/agent/tools").status_code == 401
    assert bobs.get("/api/agent/tools").status_code == 200


def test_revoking_nothing_is_an_error(alice):
    with pytest.raises(CommandError, match="nothing was revoked"):
        call_command("revoke_agent_session", "--user", "nobody", stdout=StringIO())
    with pytest.raises(CommandError, match="at least the first 8"):
        call_command("revoke_agent_session", "--token-prefix", "agt_", stdout=StringIO())


def test_a_reviewer_revokes_a_session_in_the_console(alice):
    from django.contrib.auth.models import Group

    agent = agent_client_for(alice)
    reviewer = StaffFactory(username="rita")
    reviewer.groups.add(Group.objects.get(name="Refund reviewers"))
    browser = Client()
    browser.force_login(reviewer)
    page = browser.get("/console/agent-sessions/").content.decode()
    assert agent.agent_session.token_prefix in page and "alice" in page
    assert "token_hash" not in page and agent.token not in page
    response = browser.post(f"/console/agent-sessions/{agent.agent_session.pk}/revoke")
    assert response.status_code == 302
    assert AgentSession.objects.get(pk=agent.agent_session.pk).revoked_at is not None
    assert agent.get("/api/agent/tools").status_code == 401
    record = AuditRecord.objects.get(event="agent_session_revoked")
    assert record.actor == reviewer
    after = browser.get("/console/agent-sessions/").content.decode()
    assert f"Revoked the agent session {agent.agent_session.token_prefix}" in after  # the message, once
    assert f"<code>{agent.agent_session.token_prefix}…</code>" not in after  # no longer listed
