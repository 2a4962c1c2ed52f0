"""Issue 37: the asyncio client (AsyncGatewayClient) against a live gateway, as tests/test_python_client.py
checks the sync one: the same methods, and the model's own mistakes handed back as answers, not raised;
what the model cannot mend still raises. Both clients' `withdraw` too."""

import asyncio
import json

import httpx
import pytest
from approval_gateway_client import AsyncGatewayClient, GatewayClient, GatewayError

from approvals.core.services import agent_session_create, preview_approve
from approvals.models import ApprovalRole, Preview, PreviewStatus
from tests.event_loops import run
from tests.factories import OrderFactory, UserFactory

OWN = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}


@pytest.fixture
def gateway(live_server, transactional_db, monkeypatch):
    """(base URL, token) of Alice's session with o-12."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # tests.event_loops.run closes connections in its loop
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    _, token = agent_session_create(user=alice, tools=["refund_order"])
    return live_server.url, token


def call(gateway, method, *args, **kwargs):
    """One call of the async client's `method`, on a client of its own."""

    async def body():
        async with AsyncGatewayClient(*gateway) as client:
            return await getattr(client, method)(*args, **kwargs)

    return run(body())


def test_tools_and_a_proposal(gateway):
    listing = call(gateway, "tools")
    assert [tool["name"] for tool in listing["tools"]] == ["refund_order"]
    anthropic = call(gateway, "tools", format="anthropic")
    assert anthropic[0]["strict"] is True and "maxLength" not in json.dumps(anthropic)

    answer = call(gateway, "propose", "refund_order", OWN, call_id="call-1")
    assert answer.status_code == 201 and answer.ok and answer.executed is False
    assert answer.status == "awaiting_customer" and answer.call_id == "call-1"
    assert answer.confirm_url == f"{gateway[0]}/previews/{answer.preview_id}/"
    assert Preview.objects.get(pk=answer.preview_id).status == PreviewStatus.AWAITING_CUSTOMER


def test_malformed_arguments_are_an_answer_for_the_model(gateway):
    answer = call(gateway, "propose", "refund_order", {**OWN, "currency": "EUR"})
    assert answer.status_code == 400 and answer.ok is False and answer.executed is False
    assert answer.code == "invalid_arguments"
    assert answer.body["error"]["fields"] == {"currency": ["This field is not allowed."]}
    assert Preview.objects.count() == 0


def test_a_tool_the_session_lacks_and_an_unknown_tool_are_answers(gateway):
    lacking = call(gateway, "propose", "send_invoice", {"invoice_id": "INV-17", "recipient": "billing@example.test"})
    assert lacking.status_code == 403 and lacking.ok is False and lacking.code == "tool_not_allowed"
    unknown = call(gateway, "propose", "refund_everything", {})
    assert unknown.status_code == 404 and unknown.ok is False and unknown.code == "unknown_tool"


def test_a_reused_key_with_another_body_is_an_answer(gateway):
    first = call(gateway, "propose", "refund_order", OWN, idempotency_key="key-1")
    assert first.status_code == 201 and first.ok
    again = call(gateway, "propose", "refund_order", {**OWN, "amount_minor": 400}, idempotency_key="key-1")
    assert again.status_code == 409 and again.ok is False and again.code == "idempotency_key_reused"


def test_a_policy_refusal_is_an_answer(gateway):
    answer = call(gateway, "propose", "refund_order", {**OWN, "amount_minor": 5000})
    assert answer.status_code == 422 and answer.code == "amount_exceeds_remaining"
    assert answer.body["error"]["remaining_minor"] == 1000


def test_waiting_for_the_outcome_reports_the_executors(gateway):
    proposed = call(gateway, "propose", "refund_order", OWN)
    preview = Preview.objects.get(pk=proposed.preview_id)
    preview_approve(preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest)

    final = call(gateway, "wait_for_outcome", proposed.preview_id, timeout=30)

    assert final.final and final.status == "executed" and final.outcome == "succeeded" and final.executed
    assert "Refunded €5.00 on order o-12" in final.message
    page = call(gateway, "previews", status="executed")
    assert [item["preview"]["id"] for item in page["results"]] == [proposed.preview_id]


def test_a_preview_the_session_cannot_see_is_an_answer_and_waiting_for_it_stops_at_once(gateway):
    answer = call(gateway, "wait_for_outcome", "00000000-0000-0000-0000-000000000000", timeout=60)
    assert answer.status_code == 404 and answer.ok is False and answer.code == "not_found"


@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_withdraw_answers_the_withdrawn_preview_then_a_409_once_decided(gateway, client_kind):
    def withdraw(preview_id):
        if client_kind == "async":
            return call(gateway, "withdraw", preview_id)
        with GatewayClient(*gateway) as client:
            return client.withdraw(preview_id)

    first = call(gateway, "propose", "refund_order", OWN)
    second = call(gateway, "propose", "refund_order", {**OWN, "amount_minor": 300})
    assert second.other_open_previews == [first.preview_id]

    withdrawn = withdraw(second.preview_id)
    assert withdrawn.status_code == 200 and withdrawn.ok and withdrawn.status == "withdrawn" and withdrawn.final
    assert Preview.objects.get(pk=second.preview_id).status == PreviewStatus.WITHDRAWN

    preview = Preview.objects.get(pk=first.preview_id)
    preview_approve(preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    late = withdraw(first.preview_id)
    assert late.status_code == 409 and late.ok is False and late.code == "not_awaiting_decision"
    assert late.body["error"]["status"] == "executed"
    missing = withdraw("00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and missing.code == "not_found"


def test_a_bad_token_still_raises(live_server, transactional_db, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with pytest.raises(GatewayError) as raised:
        call((live_server.url, "agt_not-a-token"), "propose", "refund_order", OWN)
    assert raised.value.status_code == 401 and raised.value.code == "authentication_failed"


@pytest.mark.parametrize("status", [429, 500, 503])
@pytest.mark.parametrize("method", ["propose", "withdraw"])
def test_throttling_and_server_errors_still_raise(status, method):
    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"ok": False, "error": {"code": "x", "message": "no"}})

    async def body():
        transport = httpx.AsyncClient(transport=httpx.MockTransport(server))
        async with transport, AsyncGatewayClient("http://gateway.test", "agt_x", http=transport) as client:
            if method == "propose":
                return await client.propose("refund_order", OWN)
            return await client.withdraw("00000000-0000-0000-0000-000000000000")

    with pytest.raises(GatewayError) as raised:
        asyncio.run(body())  # no database here
    assert raised.value.status_code == status and raised.value.code == "x"


def test_a_given_http_client_is_used_and_left_open():
    seen = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, str(request.url), request.headers["Authorization"]))
        return httpx.Response(200, json={"tools": []})

    async def body():
        http = httpx.AsyncClient(transport=httpx.MockTransport(server))
        async with AsyncGatewayClient("http://gateway.test/", "agt_x", http=http) as client:
            listing = await client.tools(format="mcp")
        assert not http.is_closed  # the caller's client is the caller's to close
        await http.aclose()
        return listing

    assert asyncio.run(body()) == {"tools": []}
    assert seen == [("GET", "http://gateway.test/api/agent/tools?format=mcp", "Bearer agt_x")]
