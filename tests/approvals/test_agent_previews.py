"""GET /api/agent/previews (a session's own, filtered, paginated), the ?wait= long-poll, and call_id."""

import pytest

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditEvent, AuditRecord, Preview
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory


def make_previews(agent, order, count):
    ids = []
    for amount in range(1, count + 1):
        response = propose(agent, order_id=order.number, amount_minor=amount, reason="damaged")
        assert response.status_code == 201, response.json()
        ids.append(response.json()["preview"]["id"])
    return ids


def confirmed(preview_id, person, capture):
    """The customer confirms; the (eager) execution runs when the confirmation commits."""
    preview = Preview.objects.get(pk=preview_id)
    with capture(execute=True):
        preview_approve(preview_id=preview.pk, approver=person, role=ApprovalRole.CUSTOMER, digest=preview.digest)


def test_the_list_holds_the_sessions_own_previews_newest_first(alice, bob, o12, o17):
    agent, other_session = agent_client_for(alice), agent_client_for(alice)
    mine = make_previews(agent, o12, 3)
    # The same person through another session: not listed.
    assert propose(other_session, order_id="o-12", amount_minor=9, reason="damaged").status_code == 201
    make_previews(agent_client_for(bob), o17, 1)
    body = agent.get("/api/agent/previews").json()
    assert [item["preview"]["id"] for item in body["results"]] == list(reversed(mine))
    assert body["next"] is None and body["previous"] is None and body["page"] == 1
    first = body["results"][0]
    assert first == {**agent.get(f"/api/agent/previews/{first['preview']['id']}").json()}
    assert first["status"] == "awaiting_customer" and first["outcome"] is None


def test_the_list_filters_by_status_and_pages(alice, o12, django_capture_on_commit_callbacks):
    agent = agent_client_for(alice)
    ids = make_previews(agent, o12, 5)

    page1 = agent.get("/api/agent/previews?status=awaiting_customer&page_size=3").json()
    assert [item["preview"]["id"] for item in page1["results"]] == [ids[4], ids[3], ids[2]]
    assert page1["next"] == "http://testserver/api/agent/previews?status=awaiting_customer&page_size=3&page=2"
    page2 = agent.get(page1["next"]).json()
    assert [item["preview"]["id"] for item in page2["results"]] == [ids[1], ids[0]]
    assert page2["next"] is None and page2["previous"].endswith("page=1")

    confirmed(ids[0], alice, django_capture_on_commit_callbacks)
    executed = agent.get("/api/agent/previews?status=executed").json()
    assert [item["preview"]["id"] for item in executed["results"]] == [ids[0]]
    assert executed["results"][0]["outcome"] == "succeeded" and executed["results"][0]["executed"] is True
    # The refund changed the order: the other proposals on it are out of date now.
    others = agent.get("/api/agent/previews?status=superseded,awaiting_customer").json()["results"]
    assert sorted(item["preview"]["id"] for item in others) == sorted(ids[1:])
    assert {item["status"] for item in others} == {Preview.objects.get(pk=ids[1]).status}
    assert agent.get("/api/agent/previews?status=declined").json()["results"] == []


@pytest.mark.parametrize(
    "query, field",
    [
        ("status=nonsense", "status"),
        ("page=0", "page"),
        ("page=x", "page"),
        ("page_size=101", "page_size"),
        ("colour=red", "colour"),
    ],
)
def test_a_malformed_list_query_is_a_400(alice_agent, query, field):
    response = alice_agent.get(f"/api/agent/previews?{query}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert field in response.json()["error"]["fields"]


def test_the_list_needs_a_token(client):
    assert client.get("/api/agent/previews").status_code == 401


def test_long_poll_answers_at_the_change(alice, o12, settings, monkeypatch, django_capture_on_commit_callbacks):
    settings.AGENT_PREVIEW_WAIT_MAX_SECONDS = 30
    agent = agent_client_for(alice)
    preview_id = make_previews(agent, o12, 1)[0]
    slept = []

    def customer_confirms_meanwhile(seconds):
        slept.append(seconds)
        if len(slept) == 2:
            confirmed(preview_id, alice, django_capture_on_commit_callbacks)

    monkeypatch.setattr("approvals.agents.api.previews.time.sleep", customer_confirms_meanwhile)
    response = agent.get(f"/api/agent/previews/{preview_id}?wait=30")
    assert response.status_code == 200
    assert response.json()["status"] == "executed" and response.json()["outcome"] == "succeeded"
    assert len(slept) == 2  # it stopped polling at the first read after the change
    assert all(seconds <= settings.AGENT_PREVIEW_WAIT_POLL_SECONDS for seconds in slept)


def test_long_poll_is_capped_and_says_how_long_it_waited(alice, o12, settings):
    settings.AGENT_PREVIEW_WAIT_MAX_SECONDS = 1
    settings.AGENT_PREVIEW_WAIT_POLL_SECONDS = 0.2
    agent = agent_client_for(alice)
    preview_id = make_previews(agent, o12, 1)[0]
    response = agent.get(f"/api/agent/previews/{preview_id}?wait=30")
    assert response.status_code == 200 and response.json()["status"] == "awaiting_customer"
    assert 1.0 <= float(response["Preview-Waited-Seconds"]) < 2.0


def test_long_poll_returns_at_once_for_a_final_state(
    alice, o12, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.AGENT_PREVIEW_WAIT_MAX_SECONDS = 30
    agent = agent_client_for(alice)
    preview_id = make_previews(agent, o12, 1)[0]
    confirmed(preview_id, alice, django_capture_on_commit_callbacks)
    monkeypatch.setattr("approvals.agents.api.previews.time.sleep", lambda seconds: pytest.fail("it waited"))
    response = agent.get(f"/api/agent/previews/{preview_id}?wait=30")
    assert response.json()["status"] == "executed"
    assert response["Preview-Waited-Seconds"] == "0.0"


@pytest.mark.parametrize("wait", ["-1", "61", "abc", "1.5"])
def test_a_malformed_wait_is_a_400(alice_agent, wait):
    response = alice_agent.get(f"/api/agent/previews/00000000-0000-0000-0000-000000000000?wait={wait}")
    assert response.status_code == 400 and "wait" in response.json()["error"]["fields"]


def test_call_id_is_echoed_and_audited_for_every_kind_of_answer(alice, o12):
    agent = agent_client_for(alice)
    ord4417 = OrderFactory(number="ORD-4417", customer=alice, currency="EUR", total_minor=2499)
    created = agent.post(
        "/api/agent/tool-calls",
        {
            "name": "refund_order",
            "call_id": "call_A",
            "arguments": {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"},
        },
        format="json",
    )
    refused = agent.post(
        "/api/agent/tool-calls",
        {
            "name": "refund_order",
            "call_id": "call_B",
            "arguments": {"order_id": ord4417.number, "amount_minor": 24990, "reason": "damaged"},
        },
        format="json",
    )
    malformed = agent.post(
        "/api/agent/tool-calls",
        {"name": "refund_order", "call_id": "call_C", "arguments": {"order_id": "o-12"}},
        format="json",
    )
    assert (created.status_code, refused.status_code, malformed.status_code) == (201, 422, 400)
    assert [r.json()["call_id"] for r in (created, refused, malformed)] == ["call_A", "call_B", "call_C"]
    assert refused.json()["error"]["message"] == (
        "Refund of €249.90 (24990) exceeds the €24.99 (2499) remaining on ORD-4417"
    )
    assert refused.json()["error"]["remaining_minor"] == 2499
    by_event = {
        record.event: record.result
        for record in AuditRecord.objects.filter(
            event__in=[AuditEvent.PROPOSED, AuditEvent.PROPOSAL_REFUSED, AuditEvent.PROPOSAL_INVALID]
        )
    }
    assert by_event[AuditEvent.PROPOSED]["call_id"] == "call_A"
    assert by_event[AuditEvent.PROPOSAL_REFUSED]["call_id"] == "call_B"
    assert by_event[AuditEvent.PROPOSAL_INVALID]["call_id"] == "call_C"


def test_a_wait_over_the_sessions_limit_answers_the_state_at_once_saying_so(alice, o12, settings, monkeypatch):
    settings.AGENT_PREVIEW_WAIT_MAX_SECONDS = 30
    settings.AGENT_PREVIEW_WAITS_PER_SESSION_MAX = 0
    agent = agent_client_for(alice)
    preview_id = make_previews(agent, o12, 1)[0]
    monkeypatch.setattr("approvals.agents.api.previews.time.sleep", lambda seconds: pytest.fail("it waited"))
    response = agent.get(f"/api/agent/previews/{preview_id}?wait=30")
    assert response.status_code == 200
    assert response.json() == agent.get(f"/api/agent/previews/{preview_id}").json()
    assert response.json()["status"] == "awaiting_customer"
    assert (response["Preview-Wait-Declined"], response["Preview-Waited-Seconds"]) == ("session", "0.0")


def test_waits_hold_at_most_their_slots_per_session_and_per_process_and_give_them_back(settings, monkeypatch):
    """The limits' accounting, with waits held open by the test: a third wait of a session holding its
    two, or any wait past the process's, answers at once; once they end, their slots are free again."""
    import itertools
    import threading
    import uuid

    from approvals.agents.api import previews

    settings.AGENT_PREVIEW_WAITS_PER_SESSION_MAX = 2
    settings.AGENT_PREVIEW_WAITS_MAX = 3
    release, entered = threading.Event(), threading.Semaphore(0)

    def held(preview, seconds):
        entered.release()
        assert release.wait(10)
        return preview, 1.0

    monkeypatch.setattr(previews, "preview_wait_for_change", held)
    preview = object()
    # Session ids of this run only: the counts live in the shared cache.
    first, second, third = itertools.islice(itertools.count(uuid.uuid4().int % 10**9 * 10), 3)
    holders = [threading.Thread(target=previews.preview_wait, args=(preview, 5, session)) for session in (first, first)]
    holders.append(threading.Thread(target=previews.preview_wait, args=(preview, 5, second)))
    for holder in holders:
        holder.start()
        assert entered.acquire(timeout=5)
    try:
        assert previews.preview_wait(preview, 5, first) == (preview, 0.0, "session")
        assert previews.preview_wait(preview, 5, third) == (preview, 0.0, "process")
    finally:
        release.set()
        for holder in holders:
            holder.join(timeout=10)
    assert previews.preview_wait(preview, 5, first) == (preview, 1.0, None)
    assert previews.preview_wait(preview, 5, third) == (preview, 1.0, None)


def test_the_client_pauses_before_asking_again_when_a_wait_is_declined(monkeypatch):
    import httpx
    from approval_gateway_client import DECLINED_WAIT_PAUSE_SECONDS, GatewayClient

    answers = iter(["awaiting_customer", "awaiting_customer", "executed"])

    def server(request):
        status = next(answers)
        declined = {"Preview-Wait-Declined": "session"} if status != "executed" and "wait" in request.url.params else {}
        return httpx.Response(200, json={"ok": True, "status": status}, headers=declined)

    slept = []
    monkeypatch.setattr("approval_gateway_client.time.sleep", slept.append)
    with GatewayClient("http://gateway.test", "agt_x", http=httpx.Client(transport=httpx.MockTransport(server))) as gw:
        answer = gw.wait_for_outcome("p-1", timeout=60)
    assert answer.status == "executed" and answer.wait_declined is None
    assert slept == [DECLINED_WAIT_PAUSE_SECONDS]
