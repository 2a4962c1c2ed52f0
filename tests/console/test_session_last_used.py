"""Agent sessions record when their token last authenticated (at most one write a minute, one UPDATE of
that column), and the console's sessions page shows it with links to the session's previews."""

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import AgentSession
from tests.conftest import agent_client_for, propose

from .conftest import logged_in


def updates_of_sessions(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].startswith('UPDATE "approvals_agentsession"')]


def test_the_token_authenticating_sets_last_used_once_a_minute_with_one_column_update(alice):
    agent = agent_client_for(alice)
    session = agent.agent_session
    assert session.last_used_at is None

    with CaptureQueriesContext(connection) as first:
        assert agent.get("/api/agent/tools").status_code == 200
    session.refresh_from_db()
    assert session.last_used_at is not None and timezone.now() - session.last_used_at < timedelta(seconds=5)
    [update] = updates_of_sessions(first)
    assert 'SET "last_used_at"' in update and "revoked_at" not in update.split("WHERE")[0]

    stamped = session.last_used_at
    with CaptureQueriesContext(connection) as again:
        assert agent.get("/api/agent/tools").status_code == 200
    assert updates_of_sessions(again) == []  # within the minute: no write
    session.refresh_from_db()
    assert session.last_used_at == stamped

    AgentSession.objects.filter(pk=session.pk).update(last_used_at=timezone.now() - timedelta(minutes=2))
    assert agent.get("/api/agent/tools").status_code == 200
    session.refresh_from_db()
    assert timezone.now() - session.last_used_at < timedelta(seconds=5)


def test_a_refused_token_records_no_use(alice):
    agent = agent_client_for(alice)
    AgentSession.objects.filter(pk=agent.agent_session.pk).update(revoked_at=timezone.now())
    assert agent.get("/api/agent/tools").status_code == 401
    agent.agent_session.refresh_from_db()
    assert agent.agent_session.last_used_at is None


def test_the_sessions_page_shows_last_used_and_links_to_the_previews(big_order, alice, reviewer):
    used = agent_client_for(alice, label="used")
    idle = agent_client_for(alice, label="idle")
    made = propose(used, order_id=big_order.number, amount_minor=12000, reason="damaged").json()
    preview_id = made["preview"]["id"]

    html = logged_in(reviewer).get("/console/agent-sessions/").content.decode()

    rows = {label: html[html.index(f"<td>{label}</td>") :].split("</tr>")[0] for label in ("used", "idle")}
    assert "Never" not in rows["used"] and "<time" in rows["used"].split('class="last-used"')[1][:80]
    assert 'class="last-used">Never' in rows["idle"]
    assert f'href="/console/previews/{preview_id}/"' in rows["used"]
    assert "/console/previews/" not in rows["idle"]
    assert idle.agent_session.pk != used.agent_session.pk
