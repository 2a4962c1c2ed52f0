"""Seed 000 end to end: a real agent framework (LangChain's `create_agent`, with a scripted chat model: no
network, no key) holds Alice's support conversation against a live gateway, once through MCP and once
through the REST client. The customer confirms in Chromium, and the agent reports the executor's outcome.

    Customer: Please refund five euros from o-12. The replacement arrived damaged.
    Customer: My friend asked me to sort out o-17. Please refund five dollars.

The second request names Bob's order from Alice's session: refused as unavailable, nothing refunded.
"""

import asyncio
import json
import re

import pytest
from approval_gateway_client import GatewayClient
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from approvals.core.services import agent_session_create
from approvals.models import AuditEvent, AuditRecord, Preview
from refunds.models import LocalGatewayRefund, Refund
from tests.browser import chromium, log_in_through, requires_chromium
from tests.factories import OrderFactory, UserFactory

PASSWORD = "correct horse battery staple"
OWN = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}
FRIEND = {"order_id": "o-17", "amount_minor": 500, "reason": "damaged"}

pytestmark = [pytest.mark.browser, requires_chromium]


class ScriptedSupportModel(BaseChatModel):
    """Plays the assistant of seed 000: which tool to call comes from the customer's words, and what it
    says afterwards only from what the tool answered (never "done" before the gateway says executed)."""

    check_tool: str = "check_preview"

    @property
    def _llm_type(self) -> str:
        return "scripted-support"

    def bind_tools(self, tools, **kwargs):  # noqa: ANN001, ANN201 - LangChain's signature
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # noqa: ANN001, ANN201
        last = messages[-1]
        if isinstance(last, ToolMessage):
            answer = json.loads(last.content)
            if not answer["ok"]:
                text = f"I could not do that: {answer['error']['message']}"
            elif answer["executed"]:
                text = f"Done. {answer['message']}"
            else:
                text = answer["message"]
            return self._reply(AIMessage(content=text))
        words = last.content
        if "o-12" in words:
            call = {"name": "refund_order", "args": OWN, "id": "call_own"}
        elif "o-17" in words:
            call = {"name": "refund_order", "args": FRIEND, "id": "call_friend"}
        elif "confirmed" in words:
            if self.check_tool == "refund_order":  # MCP: the same call again reports the outcome
                call = {"name": "refund_order", "args": OWN, "id": "call_own_again"}
            else:
                preview_id = next(
                    json.loads(m.content)["preview"]["id"]
                    for m in messages
                    if isinstance(m, ToolMessage) and m.tool_call_id == "call_own"
                )
                call = {"name": "check_preview", "args": {"preview_id": preview_id}, "id": "call_check"}
        else:
            return self._reply(AIMessage(content="How can I help?"))
        return self._reply(AIMessage(content="", tool_calls=[call]))

    @staticmethod
    def _reply(message: AIMessage) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=message)])


def refund_schema(way: str):
    """The schema each way lists: the serializer's (REST's default shape), its `mcp` projection on /mcp."""
    from approvals.agents.api.formats import mcp_schema
    from approvals.core.arguments import input_json_schema
    from refunds.serializers import RefundOrderArguments

    schema = input_json_schema(RefundOrderArguments)
    return mcp_schema(schema) if way == "mcp" else schema


def rest_tools(gateway: GatewayClient) -> list[StructuredTool]:
    definition = gateway.tools()["tools"][0]

    def refund_order(**arguments) -> str:
        return json.dumps(gateway.propose("refund_order", arguments).body)

    def check_preview(preview_id: str) -> str:
        """The real status of a proposal, waiting briefly for a change."""
        return json.dumps(gateway.wait_for_outcome(preview_id, timeout=20).body)

    return [
        StructuredTool.from_function(
            refund_order,
            name="refund_order",
            description=definition["description"],
            args_schema=definition["input_schema"],
        ),
        StructuredTool.from_function(check_preview, name="check_preview"),
    ]


def mcp_tools(url: str, token: str) -> list[StructuredTool]:
    async def listed():
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            return (await client.list_tools()).tools

    async def call(name, arguments):
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            result = await client.call_tool(name, arguments)
        return json.dumps(result.structured_content)

    tools = []
    for tool in asyncio.run(listed()):

        def run(_name=tool.name, **arguments) -> str:
            return asyncio.run(call(_name, arguments))

        tools.append(
            StructuredTool.from_function(
                run, name=tool.name, description=tool.description, args_schema=tool.input_schema
            )
        )
    return tools


def confirm_in_chromium(confirm_url: str) -> None:
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        log_in_through(page, confirm_url, "alice", PASSWORD)
        expect(page.get_by_role("heading", level=1)).to_have_text("Refund €5.00 on order o-12")
        page.get_by_role("button", name=re.compile(r"^Confirm")).click()
        expect(page.get_by_role("status")).to_contain_text("Refunded €5.00 on order o-12")


@pytest.mark.parametrize("way", ["mcp", "rest"])
def test_seed_000_conversation_through_a_real_agent_framework(way, live_server, monkeypatch, settings):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # the MCP client's loop (chromium() covers its own)
    settings.LOGIN_FAILURE_LIMIT = 10**6
    alice = UserFactory(username="alice", password=PASSWORD)
    bob = UserFactory(username="bob")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    OrderFactory(number="o-17", customer=bob, currency="USD", total_minor=1000)
    session, token = agent_session_create(user=alice, tools=["refund_order"])

    if way == "mcp":
        tools = mcp_tools(f"{live_server.url}/mcp", token)
        model = ScriptedSupportModel(check_tool="refund_order")
    else:
        gateway = GatewayClient(live_server.url, token)
        tools = rest_tools(gateway)
        model = ScriptedSupportModel()
    assert tools[0].args_schema == refund_schema(way)  # the schema the agent got is the serializer's
    agent = create_agent(model, tools, system_prompt="Every tool call is a proposal; report only what it says.")

    state = agent.invoke(
        {"messages": [HumanMessage("Please refund five euros from o-12. The replacement arrived damaged.")]}
    )
    proposal = json.loads(state["messages"][-2].content)
    assert proposal["status"] == "awaiting_customer" and proposal["executed"] is False
    assert proposal["preview"]["currency"] == "EUR"
    said = state["messages"][-1].content
    assert "nothing has happened yet" in said and proposal["preview"]["confirm_url"] in said
    assert Refund.objects.count() == 0

    state = agent.invoke(
        {
            "messages": [
                *state["messages"],
                HumanMessage("My friend asked me to sort out o-17. Please refund five dollars."),
            ]
        }
    )
    assert state["messages"][-1].content == (
        "I could not do that: Order o-17 is not available: no such order belongs to this customer."
    )

    confirm_in_chromium(proposal["preview"]["confirm_url"])

    state = agent.invoke({"messages": [*state["messages"], HumanMessage("I confirmed it on the page.")]})
    outcome = json.loads(state["messages"][-2].content)
    assert outcome["status"] == "executed" and outcome["outcome"] == "succeeded"
    assert state["messages"][-1].content == f"Done. {outcome['message']}"
    assert "Refunded €5.00 on order o-12" in state["messages"][-1].content

    refund = Refund.objects.get()
    assert (refund.amount_minor, refund.currency, refund.order.number) == (500, "EUR", "o-12")
    assert LocalGatewayRefund.objects.count() == 1
    assert Preview.objects.filter(subject_id="o-17").count() == 0
    refused = AuditRecord.objects.get(event=AuditEvent.PROPOSAL_REFUSED)
    assert refused.subject_id == "o-17" and refused.agent_session_id == session.pk
    assert refused.result["error"]["code"] == "order_unavailable"
