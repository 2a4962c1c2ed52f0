"""Issue 16, item 8: more agent sessions do not mean more calls; refused calls leave a bounded trace."""

import hashlib
import json
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from approvals.core.errors import ApplicationError
from approvals.core.services import agent_session_create, agent_sessions_revoke
from approvals.models import AgentSession, AuditRecord, RejectedCallTally
from tests.conftest import agent_client_for, propose

from .test_agent_api import csrf_token, logged_in_browser
from .test_hostile_input import post_raw


def test_a_person_cannot_mint_more_live_sessions_than_allowed(alice, settings):
    settings.AGENT_SESSIONS_PER_USER_MAX = 3
    browser = logged_in_browser(alice)
    answers = [
        browser.post(
            "/api/agent/sessions",
            {"tools": ["refund_order"]},
            format="json",
            headers={"X-CSRFToken": csrf_token(browser)},
        )
        for _ in range(4)
    ]
    assert [a.status_code for a in answers] == [201, 201, 201, 403]
    error = answers[3].json()["error"]
    assert error["code"] == "agent_session_limit"
    assert (error["live_sessions"], error["limit"]) == (3, 3)
    assert "token" not in answers[3].json()
    assert AgentSession.objects.filter(user=alice).count() == 3
    assert AuditRecord.objects.filter(event="agent_session_created", actor=alice).count() == 3


def test_revoked_and_expired_sessions_do_not_count(alice, bob, settings):
    settings.AGENT_SESSIONS_PER_USER_MAX = 2
    first, _ = agent_session_create(user=alice, tools=["refund_order"])
    second, _ = agent_session_create(user=alice, tools=["refund_order"])
    agent_session_create(user=bob, tools=["refund_order"])  # someone else's does not count either
    with pytest.raises(ApplicationError) as refused:
        agent_session_create(user=alice, tools=["refund_order"])
    assert refused.value.code == "agent_session_limit"
    agent_sessions_revoke(token_prefix=first.token_prefix)
    AgentSession.objects.filter(pk=second.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    agent_session_create(user=alice, tools=["refund_order"])
    agent_session_create(user=alice, tools=["refund_order"])
    assert AgentSession.objects.filter(user=alice).count() == 4


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_mints_do_not_pass_the_cap(settings):
    from tests.factories import UserFactory

    settings.AGENT_SESSIONS_PER_USER_MAX = 3
    alice = UserFactory(username="alice")
    barrier = threading.Barrier(8)
    outcomes = []

    def mint():
        try:
            barrier.wait()
            agent_session_create(user=alice, tools=["refund_order"])
            outcomes.append("minted")
        except ApplicationError as error:
            outcomes.append(error.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=mint) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["agent_session_limit"] * 5 + ["minted"] * 3
    assert AgentSession.objects.filter(user=alice).count() == 3


@pytest.fixture
def fresh_throttles(settings):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "throttles-not-multiplied"}
    }
    from django.core.cache import caches

    caches["default"].clear()
    yield
    caches["default"].clear()


def test_one_bucket_per_person_across_sessions(alice, bob, o12, settings, fresh_throttles):
    settings.AGENT_THROTTLE_RATE = "100/min"
    settings.AGENT_USER_THROTTLE_RATE = "4/min"
    sessions = [agent_client_for(alice) for _ in range(3)]
    answers = [client.get("/api/agent/tools").status_code for client in sessions for _ in range(2)]
    assert answers == [200, 200, 200, 200, 429, 429]
    assert propose(sessions[2], order_id="o-12", amount_minor=100, reason="damaged").status_code == 429
    # A fresh session of the same person is in the same bucket; another person is not.
    assert agent_client_for(alice).get("/api/agent/tools").status_code == 429
    assert agent_client_for(bob).get("/api/agent/tools").status_code == 200


def test_throttled_calls_are_counted_per_session_and_minute_not_audited_one_by_one(alice, settings, fresh_throttles):
    settings.AGENT_THROTTLE_RATE = "2/min"
    settings.AGENT_REJECTED_CALLS_AUDITED_PER_MINUTE = 3
    client = agent_client_for(alice)
    body = json.dumps(
        {
            "name": "refund_order",
            "arguments": {"order_id": "o-12", "amount_minor": 1, "reason": "damaged", "pad": "x" * 5000},
        }
    )
    codes = [post_raw(client, body).status_code for _ in range(42)]
    assert codes == [400, 400] + [429] * 40

    throttled = RejectedCallTally.objects.get(agent_session=client.agent_session, kind="throttled")
    assert throttled.count == 40
    assert throttled.minute.second == 0 and throttled.minute.microsecond == 0
    assert throttled.last_arguments_sha256 == hashlib.sha256(body.encode()).hexdigest()
    assert throttled.last_arguments_sample == body[:200]
    assert throttled.last_code == "throttled"
    records = AuditRecord.objects.filter(agent_session=client.agent_session, event="call_throttled")
    assert records.count() == 3
    assert all(len(r.raw_arguments) <= 200 for r in records)
    assert [r.result["error"]["calls_this_minute"] for r in records.order_by("id")] == [1, 2, 3]


def test_malformed_calls_are_counted_and_only_the_first_ones_audited(alice, settings, monkeypatch):
    settings.AGENT_REJECTED_CALLS_AUDITED_PER_MINUTE = 5
    client = agent_client_for(alice)
    # All 31 calls within one minute, whenever the test runs (the tally is per session and minute).
    now = timezone.now().replace(second=10)
    monkeypatch.setattr(timezone, "now", lambda: now)
    for n in range(30):
        assert post_raw(client, json.dumps({"name": "refund_order", "arguments": {"order_id": n}})).status_code == 400
    assert post_raw(client, "not json at all").status_code == 400
    tally = RejectedCallTally.objects.get(agent_session=client.agent_session, kind="malformed")
    assert tally.count == 31
    assert tally.last_code == "malformed_request"
    invalid = AuditRecord.objects.filter(agent_session=client.agent_session, event="proposal_invalid")
    assert invalid.count() == 5
    assert json.loads(invalid.order_by("id").first().raw_arguments) == {"order_id": 0}


def test_the_tally_starts_again_each_minute(alice, settings, monkeypatch):
    settings.AGENT_REJECTED_CALLS_AUDITED_PER_MINUTE = 1
    client = agent_client_for(alice)
    now = timezone.now().replace(second=30)
    monkeypatch.setattr(timezone, "now", lambda: now)
    post_raw(client, "{}")
    post_raw(client, "{}")
    now = now + timedelta(minutes=1)
    post_raw(client, "{}")
    counts = list(RejectedCallTally.objects.order_by("minute").values_list("count", flat=True))
    assert counts == [2, 1]
    assert AuditRecord.objects.filter(agent_session=client.agent_session, event="proposal_invalid").count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_refused_calls_lose_no_count():
    from rest_framework.test import APIClient

    from tests.factories import UserFactory

    alice = UserFactory(username="alice")
    session, token = agent_session_create(user=alice, tools=["refund_order"])
    barrier = threading.Barrier(8)

    def flood():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        barrier.wait()
        for _ in range(5):
            client.generic("POST", "/api/agent/tool-calls", "[]", content_type="application/json")
        connection.close()

    threads = [threading.Thread(target=flood) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (tally,) = RejectedCallTally.objects.filter(agent_session=session)
    assert tally.count == 40
