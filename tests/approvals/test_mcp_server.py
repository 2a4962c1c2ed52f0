"""The MCP server at /mcp, driven by the official `mcp` client against a live server (revision 2026-07-28).

The same bearer token, the same tools, the same service as the REST API: every answer is checked in the
tool result, in the database and in the audit log.
"""

import httpx
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from approvals.agents.api.formats import mcp_schema
from approvals.core.arguments import input_json_schema
from approvals.core.services import agent_session_create, preview_approve
from approvals.models import ApprovalRole, AuditEvent, AuditRecord, Preview, PreviewStatus
from refunds.models import OrderStatus, Refund
from refunds.serializers import RefundOrderArguments
from tests.event_loops import run
from tests.factories import OrderFactory, UserFactory


@pytest.fixture
def shop(live_server, monkeypatch):
    # The elicitation callback confirms as the customer from inside the client's event loop.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    orders = {
        "o-12": OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000),
        "o-17": OrderFactory(number="o-17", customer=bob, currency="USD", total_minor=1000),
        "ORD-4417": OrderFactory(number="ORD-4417", customer=alice, currency="EUR", total_minor=2499),
        "o-20": OrderFactory(number="o-20", customer=alice, status=OrderStatus.SHIPPED, delivered_at=None),
        "o-30": OrderFactory(number="o-30", customer=alice, currency="EUR", total_minor=50000),
    }
    session, token = agent_session_create(user=alice, tools=["refund_order"])
    return {
        "url": f"{live_server.url}/mcp",
        "alice": alice,
        "bob": bob,
        "orders": orders,
        "session": session,
        "token": token,
    }


async def connect(url, token, **kwargs):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    client = Client(streamable_http_client(url, http_client=http), **kwargs)
    return http, client


async def with_client(url, token, body, **kwargs):
    http, client = await connect(url, token, **kwargs)
    async with http, client:
        assert client.protocol_version == "2026-07-28"
        return await body(client)


REFUND = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}


def test_lists_exactly_the_sessions_tools_with_the_serializers_schema_and_annotations(shop):
    async def body(client):
        return await client.list_tools()

    listed = run(with_client(shop["url"], shop["token"], body))
    assert [tool.name for tool in listed.tools] == ["refund_order", "withdraw_preview"]
    tool = listed.tools[0]
    # The `mcp` format's schema: what both strict modes take, the bounds said in words (test_tool_formats).
    assert tool.input_schema == mcp_schema(input_json_schema(RefundOrderArguments))
    assert "maxLength" not in tool.input_schema["properties"]["order_id"]
    assert tool.annotations.destructive_hint is True
    assert tool.annotations.idempotent_hint is True
    assert tool.annotations.read_only_hint is False


def test_a_proposal_elicits_the_confirmation_page_and_the_retry_reports_the_executors_outcome(shop):
    asked = []

    async def confirm(context, params):
        asked.append(params)
        preview = Preview.objects.get(agent_session=shop["session"])
        # The customer confirms on the page the URL names (the page itself is tested with the browser).
        preview_approve(
            preview_id=preview.pk, approver=shop["alice"], role=ApprovalRole.CUSTOMER, digest=preview.digest
        )
        return types.ElicitResult(action="accept")

    async def body(client):
        return await client.call_tool("refund_order", REFUND, meta={"call_id": "call-1"})

    result = run(with_client(shop["url"], shop["token"], body, elicitation_callback=confirm))

    preview = Preview.objects.get(agent_session=shop["session"])
    assert len(asked) == 1
    assert asked[0].mode == "url"
    assert asked[0].url == f"{shop['url'].removesuffix('/mcp')}/previews/{preview.pk}/"
    assert asked[0].message.startswith(
        "Please check this request and confirm it on the page if it is right: Refund €5.00 on order o-12"
    )
    assert "Nothing happens unless you confirm it there before " in asked[0].message
    assert "the customer" not in asked[0].message.lower()  # the customer reads it: spoken to, not of
    assert result.is_error is False
    answer = result.structured_content
    assert answer["status"] == "executed" and answer["executed"] is True and answer["outcome"] == "succeeded"
    assert answer["preview"]["id"] == str(preview.pk) and answer["preview"]["currency"] == "EUR"
    assert answer["call_id"] == "call-1"
    assert result.content[0].text == answer["message"]
    assert "Refunded €5.00 on order o-12" in answer["message"]
    refund = Refund.objects.get()
    assert (refund.preview_id, refund.amount_minor, refund.currency) == (preview.pk, 500, "EUR")
    proposed = AuditRecord.objects.get(preview=preview, event=AuditEvent.PROPOSED)
    assert proposed.result["call_id"] == "call-1"
    assert proposed.agent_session_id == shop["session"].pk and proposed.actor_id == shop["alice"].pk
    assert {"confirmed", "executed"} <= set(AuditRecord.objects.filter(preview=preview).values_list("event", flat=True))


@pytest.mark.parametrize(
    ("action", "came_back"),
    [
        ("decline", "The customer declined to open the confirmation page: nothing has happened."),
        ("cancel", "The customer dismissed the confirmation request: nothing has happened."),
        ("accept", "The customer opened the confirmation page but has not confirmed: nothing has happened."),
    ],
)
def test_coming_back_without_confirming_is_said_not_the_pending_text_again(shop, action, came_back):
    """Issue 37: a declined or abandoned confirmation answered with the same pending text as the first call."""

    async def leave(context, params):
        return types.ElicitResult(action=action)

    async def body(client):
        return await client.call_tool("refund_order", REFUND, meta={"call_id": f"call-{action}"})

    result = run(with_client(shop["url"], shop["token"], body, elicitation_callback=leave))
    preview = Preview.objects.get(agent_session=shop["session"])
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER
    assert result.is_error is False
    text = result.content[0].text
    assert text.startswith(came_back)
    assert f"still waits for their confirmation at {result.structured_content['preview']['confirm_url']}" in text
    assert text != result.structured_content["message"]
    assert not Refund.objects.exists()


def test_the_same_call_again_after_the_decision_reports_the_outcome_and_proposes_nothing_new(shop):
    async def first(client):
        return await client.call_tool("refund_order", REFUND)

    waiting = run(with_client(shop["url"], shop["token"], first))  # no elicitation declared: words and URL
    preview = Preview.objects.get()
    assert waiting.is_error is False
    assert waiting.structured_content["status"] == "awaiting_customer"
    assert waiting.structured_content["preview"]["confirm_url"] in waiting.content[0].text
    assert "The customer must confirm" in waiting.content[0].text

    preview_approve(preview_id=preview.pk, approver=shop["alice"], role=ApprovalRole.CUSTOMER, digest=preview.digest)
    again = run(with_client(shop["url"], shop["token"], first))
    assert again.structured_content["preview"]["id"] == str(preview.pk)
    assert again.structured_content["status"] == "executed"
    assert again.structured_content["outcome"] == "succeeded"
    assert Preview.objects.count() == 1
    assert Refund.objects.count() == 1


def test_a_replayed_call_id_answers_with_the_same_preview(shop):
    async def body(client):
        one = await client.call_tool("refund_order", REFUND, meta={"call_id": "call-7"})
        two = await client.call_tool("refund_order", REFUND, meta={"call_id": "call-7"})
        conflict = await client.call_tool("refund_order", {**REFUND, "amount_minor": 400}, meta={"call_id": "call-7"})
        return one, two, conflict

    one, two, conflict = run(with_client(shop["url"], shop["token"], body))
    assert one.structured_content["preview"]["id"] == two.structured_content["preview"]["id"]
    assert Preview.objects.count() == 1
    assert AuditRecord.objects.filter(event=AuditEvent.PROPOSED).count() == 1
    assert conflict.is_error is True
    assert conflict.structured_content["error"]["code"] == "idempotency_key_reused"
    assert Preview.objects.count() == 1


def test_waiting_for_staff_says_so(shop):
    async def confirm(context, params):
        preview = Preview.objects.get()
        preview_approve(
            preview_id=preview.pk, approver=shop["alice"], role=ApprovalRole.CUSTOMER, digest=preview.digest
        )
        return types.ElicitResult(action="accept")

    async def body(client):
        return await client.call_tool("refund_order", {"order_id": "o-30", "amount_minor": 20000, "reason": "damaged"})

    result = run(with_client(shop["url"], shop["token"], body, elicitation_callback=confirm))
    assert result.structured_content["status"] == "awaiting_staff"
    assert "A staff member must review and approve it" in result.content[0].text
    assert Preview.objects.get().status == PreviewStatus.AWAITING_STAFF
    assert Refund.objects.count() == 0


REFUSALS = [
    (
        {"order_id": "o-17", "amount_minor": 500, "reason": "damaged"},
        "order_unavailable",
        {},
        "Order o-17 is not available",
    ),
    (
        {"order_id": "no-such", "amount_minor": 500, "reason": "damaged"},
        "order_unavailable",
        {},
        "Order no-such is not available",
    ),
    (
        {"order_id": "o-20", "amount_minor": 500, "reason": "damaged"},
        "order_not_refundable",
        {"order_status": "shipped"},
        "only delivered orders can be refunded",
    ),
    ({"order_id": "o-12", "amount_minor": 0, "reason": "damaged"}, "zero_amount", {}, "would do nothing"),
    (
        {"order_id": "ORD-4417", "amount_minor": 24990, "reason": "damaged"},
        "amount_exceeds_remaining",
        {"remaining_minor": 2499},
        "Refund of €249.90 (24990) exceeds the €24.99 (2499) remaining on ORD-4417",
    ),
    (
        {"order_id": "ORD-4417", "amount_minor": 100, "reason": "late"},
        "reason_not_applicable",
        {"delivery_days": 2},
        "was delivered 2 days after it was placed",
    ),
]


def test_each_refusal_rule_is_an_error_result_with_its_code_and_numbers(shop):
    async def body(client):
        return [await client.call_tool("refund_order", arguments) for arguments, *_ in REFUSALS]

    results = run(with_client(shop["url"], shop["token"], body))
    for result, (arguments, code, facts, words) in zip(results, REFUSALS, strict=True):
        assert result.is_error is True, arguments
        error = result.structured_content["error"]
        assert error["code"] == code
        assert words in error["message"]
        assert result.structured_content["ok"] is False and result.structured_content["executed"] is False
        text = result.content[0].text
        assert text.startswith(f"{code}: ") and words in text
        for name, value in facts.items():
            assert error[name] == value
            assert f"{name}={value}" in text
    assert Preview.objects.count() == 0
    refused = AuditRecord.objects.filter(event=AuditEvent.PROPOSAL_REFUSED).order_by("id")
    assert [record.result["error"]["code"] for record in refused] == [code for _, code, *_ in REFUSALS]
    assert {record.agent_session_id for record in refused} == {shop["session"].pk}
    # Bob's order was named and refused exactly like a missing one: nothing about it is told.
    assert results[0].structured_content["error"]["message"].replace("o-17", "X") == results[1].structured_content[
        "error"
    ]["message"].replace("no-such", "X")


def test_invalid_arguments_are_an_error_result_and_audited(shop):
    async def body(client):
        return await client.call_tool("refund_order", {**REFUND, "currency": "USD"})

    result = run(with_client(shop["url"], shop["token"], body))
    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "invalid_arguments"
    assert "currency" in result.structured_content["error"]["fields"]
    assert Preview.objects.count() == 0
    record = AuditRecord.objects.get(event=AuditEvent.PROPOSAL_INVALID)
    assert '"currency":"USD"' in record.raw_arguments  # the text the client sent


def test_a_tool_the_session_lacks_is_refused_and_audited(shop):
    async def body(client):
        with pytest.raises(MCPError) as refused:
            await client.call_tool("send_invoice", {"invoice_id": "INV-17", "recipient": "billing@example.test"})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("delete_everything", {})
        return refused.value, unknown.value

    refused, unknown = run(with_client(shop["url"], shop["token"], body))
    assert refused.code == types.INVALID_PARAMS
    assert "may not use the tool 'send_invoice'" in refused.message
    assert unknown.code == types.INVALID_PARAMS
    assert Preview.objects.count() == 0
    assert AuditRecord.objects.filter(event=AuditEvent.PROPOSAL_FORBIDDEN, action="send_invoice").count() == 1
    assert AuditRecord.objects.filter(event=AuditEvent.PROPOSAL_INVALID, action="delete_everything").count() == 1


def test_a_bad_token_gets_401_and_no_tools(shop):
    response = httpx.post(
        shop["url"],
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": "Bearer agt_not-a-token", "Accept": "application/json"},
    )
    assert response.status_code == 401
    origin = shop["url"].removesuffix("/mcp")
    assert response.headers["WWW-Authenticate"] == (
        f'Bearer realm="agent", resource_metadata="{origin}/.well-known/oauth-protected-resource"'
    )
    assert response.json()["error"]["code"] == "authentication_failed"
    missing = httpx.post(shop["url"], json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert missing.status_code == 401

    async def body(client):
        return await client.list_tools()

    with pytest.raises(Exception):  # noqa: B017 - the SDK's transport error for a 401, whatever its class
        run(with_client(shop["url"], "agt_not-a-token", body))


def test_annotations_sent_by_the_client_change_nothing(shop):
    """Tool annotations are the server's hints to clients; a call carrying its own is the same proposal."""

    async def body(client):
        return await client.call_tool(
            "refund_order",
            REFUND,
            meta={"call_id": "c-9", "annotations": {"destructiveHint": False, "readOnlyHint": True, "approved": True}},
        )

    result = run(with_client(shop["url"], shop["token"], body))
    assert result.structured_content["status"] == "awaiting_customer"
    assert result.structured_content["executed"] is False
    assert Preview.objects.get().status == PreviewStatus.AWAITING_CUSTOMER
    assert Refund.objects.count() == 0
