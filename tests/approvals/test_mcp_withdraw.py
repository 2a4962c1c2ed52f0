"""Issue 37 over MCP, with the official `mcp` client against a live server: the `withdraw_preview` tool, the
note on other open proposals of the session, and bounds the strict schemas no longer carry, still refused."""

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from approvals.agents.api.formats import WITHDRAW_TOOL_DESCRIPTION
from approvals.core.arguments import MAX_SAFE_MINOR
from approvals.core.services import agent_session_create, preview_approve
from approvals.models import ApprovalRole, AuditEvent, AuditRecord, Preview, PreviewStatus
from tests.event_loops import run
from tests.factories import OrderFactory, UserFactory

REFUND = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}


@pytest.fixture
def shop(live_server, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # tests.event_loops.run closes connections in its loop
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    OrderFactory(number="o-17", customer=bob, currency="USD", total_minor=1000)
    session, token = agent_session_create(user=alice, tools=["refund_order"])
    _, bobs_token = agent_session_create(user=bob, tools=["refund_order"])
    return {"url": f"{live_server.url}/mcp", "alice": alice, "session": session, "token": token, "bob": bobs_token}


def calls(url, token, *steps):
    """Each step `(tool, arguments)` called in turn on one client; their results."""

    async def body():
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            return [await client.call_tool(name, arguments) for name, arguments in steps]

    return run(body())


def listed(url, token):
    async def body():
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            return (await client.list_tools()).tools

    return run(body())


def test_withdraw_preview_is_listed_with_a_strict_schema(shop):
    tools = {tool.name: tool for tool in listed(shop["url"], shop["token"])}
    assert list(tools) == ["refund_order", "withdraw_preview"]
    withdraw = tools["withdraw_preview"]
    assert withdraw.description == WITHDRAW_TOOL_DESCRIPTION
    assert withdraw.input_schema == {
        "type": "object",
        "properties": {
            "preview_id": {
                "type": "string",
                "format": "uuid",
                "description": "The preview's id: `preview.id` in the answer of the proposal.",
            }
        },
        "required": ["preview_id"],
        "additionalProperties": False,
    }
    assert withdraw.annotations.destructive_hint is False and withdraw.annotations.idempotent_hint is True


def test_a_waiting_proposal_is_withdrawn_over_mcp_and_audited(shop):
    (proposed,) = calls(shop["url"], shop["token"], ("refund_order", REFUND))
    preview_id = proposed.structured_content["preview"]["id"]

    withdrawn, again = calls(
        shop["url"],
        shop["token"],
        ("withdraw_preview", {"preview_id": preview_id}),
        ("withdraw_preview", {"preview_id": preview_id}),
    )

    assert withdrawn.is_error is False
    assert withdrawn.structured_content["status"] == "withdrawn"
    assert withdrawn.structured_content["preview"]["failure"]["code"] == "withdrawn"
    assert withdrawn.content[0].text == (
        "Refund €5.00 on order o-12: withdrawn by the agent before it was decided, nothing was done."
    )
    assert again.is_error is False and again.structured_content == withdrawn.structured_content
    preview = Preview.objects.get(pk=preview_id)
    assert preview.status == PreviewStatus.WITHDRAWN
    record = AuditRecord.objects.get(preview=preview, event=AuditEvent.WITHDRAWN)
    assert record.agent_session_id == shop["session"].pk and record.result["previous_status"] == "awaiting_customer"


def test_a_decided_proposal_is_an_error_result_saying_its_status(shop):
    (proposed,) = calls(shop["url"], shop["token"], ("refund_order", REFUND))
    preview = Preview.objects.get(pk=proposed.structured_content["preview"]["id"])
    preview_approve(preview_id=preview.pk, approver=shop["alice"], role=ApprovalRole.CUSTOMER, digest=preview.digest)

    (refused,) = calls(shop["url"], shop["token"], ("withdraw_preview", {"preview_id": str(preview.pk)}))

    assert refused.is_error is True
    assert refused.structured_content["error"]["code"] == "not_awaiting_decision"
    assert refused.structured_content["error"]["status"] == "executed"
    assert refused.content[0].text == (
        "not_awaiting_decision: This preview can no longer be withdrawn: its status is executed (completed). "
        "Only a preview waiting for the customer or staff can be. (status=executed)"
    )
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED


def test_another_persons_preview_and_malformed_arguments_are_error_results(shop):
    (bobs,) = calls(shop["url"], shop["bob"], ("refund_order", {**REFUND, "order_id": "o-17"}))
    bobs_id = bobs.structured_content["preview"]["id"]

    foreign, not_an_id, extra = calls(
        shop["url"],
        shop["token"],
        ("withdraw_preview", {"preview_id": bobs_id}),
        ("withdraw_preview", {"preview_id": "o-17"}),
        ("withdraw_preview", {"preview_id": bobs_id, "reason": "changed my mind"}),
    )

    assert foreign.is_error is True and foreign.structured_content["error"] == {
        "code": "not_found",
        "message": "This agent session proposed no preview with this id.",
    }
    assert not_an_id.is_error is True and not_an_id.structured_content["error"]["code"] == "invalid_arguments"
    assert list(not_an_id.structured_content["error"]["fields"]) == ["preview_id"]
    assert extra.is_error is True and extra.structured_content["error"]["fields"] == {
        "reason": ["This field is not allowed."]
    }
    assert Preview.objects.get(pk=bobs_id).status == PreviewStatus.AWAITING_CUSTOMER
    invalid = AuditRecord.objects.filter(event=AuditEvent.PROPOSAL_INVALID, action="withdraw_preview")
    assert invalid.count() == 2


def test_a_second_proposal_on_the_same_order_names_the_open_one(shop):
    first, second = calls(
        shop["url"], shop["token"], ("refund_order", REFUND), ("refund_order", {**REFUND, "amount_minor": 300})
    )
    first_id = first.structured_content["preview"]["id"]
    assert "other_open_previews" not in first.structured_content
    assert second.structured_content["other_open_previews"] == [first_id]
    assert f"This agent session has 1 other open proposal on order o-12 ({first_id})" in second.content[0].text


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({**REFUND, "order_id": "o" * 65}, "order_id"),
        ({**REFUND, "amount_minor": MAX_SAFE_MINOR + 1}, "amount_minor"),
        ({**REFUND, "amount_minor": -1}, "amount_minor"),
    ],
)
def test_a_value_past_a_bound_the_schema_only_states_is_still_refused(shop, arguments, field):
    (result,) = calls(shop["url"], shop["token"], ("refund_order", arguments))
    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "invalid_arguments"
    assert list(result.structured_content["error"]["fields"]) == [field]
    assert not Preview.objects.exists()


def test_the_listing_and_the_tool_agree_on_the_bounds_in_words(shop):
    refund = listed(shop["url"], shop["token"])[0]
    amount = refund.input_schema["properties"]["amount_minor"]
    assert "maximum" not in amount and f"An integer from 0 to {MAX_SAFE_MINOR}." in amount["description"]
    assert isinstance(refund, types.Tool)
