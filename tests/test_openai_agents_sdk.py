"""Issue 37: the OpenAI Agents SDK's own runner (`Runner.run`) holds a support conversation against a live
gateway through the glue in approval_gateway_client.openai_agents, once over REST (function tools with the
strict schemas) and once over MCP (the SDK's MCPServerStreamableHttp, strict mode on). The model is
scripted (an `agents.models.interface.Model` of this file: no network, no key); everything else is the SDK's.

    Customer: Please refund five euros from o-52. It arrived damaged.
    Customer: My friend asked me to sort out o-17.          (Bob's order: refused, told as such)
    Customer: I confirmed it on the page.                   (the model reports the executor's outcome)
    Customer: Please refund three euros from o-52 as well.  (a second proposal; then:)
    Customer: Cancel that last one, please.                 (withdrawn: nothing done)
"""

import json
from typing import Any

import pytest
from agents import Agent, ModelResponse, ModelSettings, RunConfig, Runner, Usage
from agents.models.interface import Model
from approval_gateway_client import AsyncGatewayClient
from approval_gateway_client.openai_agents import (
    INSTRUCTIONS,
    MCP_CONFIG,
    gateway_function_tools,
    gateway_mcp_server,
)
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from approvals.core.services import agent_session_create, preview_approve
from approvals.models import ApprovalRole, AuditEvent, AuditRecord, Preview, PreviewStatus
from refunds.models import Refund
from tests.approvals.test_tool_formats import check_openai_strict
from tests.event_loops import run
from tests.factories import OrderFactory, UserFactory

FIVE = {"order_id": "o-52", "amount_minor": 500, "reason": "damaged"}
THREE = {"order_id": "o-52", "amount_minor": 300, "reason": "damaged"}
FRIEND = {"order_id": "o-17", "amount_minor": 500, "reason": "damaged"}


def _text_of(item: dict[str, Any]) -> str:
    content = item.get("content") if "content" in item else item.get("output")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def _answer(output: str) -> dict[str, Any]:
    """A tool's output as the gateway's envelope: JSON (REST, and MCP's structured content), or MCP's text
    of a refusal (`code: message (facts)`)."""
    try:
        return json.loads(output)
    except ValueError:
        code, _, message = output.partition(": ")
        return {"ok": False, "error": {"code": code, "message": message.split(" (")[0]}}


class ScriptedSupportModel(Model):
    """The assistant: which tool to call comes from the customer's words, and what it says afterwards only
    from what the tool answered (never "done" before the gateway says executed)."""

    def __init__(self, *, check_by_asking_again: bool) -> None:
        self.check_by_asking_again = check_by_asking_again  # MCP: the same call again reports the outcome
        self.tools_seen: list[list[Any]] = []
        self.calls = 0

    async def get_response(self, system_instructions, input, model_settings, tools, *args, **kwargs):  # noqa: A002, ANN001, ANN201
        assert system_instructions == INSTRUCTIONS
        self.tools_seen.append(list(tools))
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        last = items[-1]
        if last.get("type") == "function_call_output":
            answer = _answer(_text_of(last))
            if not answer["ok"]:
                return self._say(f"I could not do that: {answer['error']['message']}")
            return self._say(f"Done. {answer['message']}" if answer["executed"] else answer["message"])
        words = _text_of(last)
        if "five euros from o-52" in words:
            return self._call("refund_order", FIVE)
        if "three euros from o-52" in words:
            return self._call("refund_order", THREE)
        if "o-17" in words:
            return self._call("refund_order", FRIEND)
        if "confirmed" in words:
            if self.check_by_asking_again:
                return self._call("refund_order", FIVE)
            return self._call("check_preview", {"preview_id": self._proposed(items, FIVE)})
        if "Cancel" in words:
            return self._call("withdraw_preview", {"preview_id": self._proposed(items, THREE)})
        return self._say("How can I help?")

    def stream_response(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        raise NotImplementedError("the runner is not streamed here")

    @staticmethod
    def _proposed(items: list[dict[str, Any]], arguments: dict[str, Any]) -> str:
        """The id of the preview the call with these arguments made."""
        calls = {i["call_id"]: json.loads(i["arguments"]) for i in items if i.get("type") == "function_call"}
        for item in items:
            if item.get("type") == "function_call_output" and calls.get(item["call_id"]) == arguments:
                return _answer(_text_of(item))["preview"]["id"]
        raise AssertionError(f"no proposal of {arguments}")

    def _call(self, name: str, arguments: dict[str, Any]) -> ModelResponse:
        self.calls += 1
        call = ResponseFunctionToolCall(
            type="function_call",
            id=f"fc_{self.calls}",
            call_id=f"call_{self.calls}",
            name=name,
            arguments=json.dumps(arguments),
            status="completed",
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def _say(self, text: str) -> ModelResponse:
        self.calls += 1
        message = ResponseOutputMessage(
            id=f"msg_{self.calls}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)


class Conversation:
    """One agent with the gateway's tools (REST or MCP), kept across the customer's turns."""

    def __init__(self, way: str, base_url: str, token: str) -> None:
        self.way, self.base_url, self.token = way, base_url, token
        self.model = ScriptedSupportModel(check_by_asking_again=way == "mcp")
        self.history: list[Any] = []

    def say(self, words: str) -> tuple[str, dict[str, Any]]:
        """The customer's words; the assistant's reply and the last tool answer it relayed."""
        result = run(self._turn(words))
        self.history = result.to_input_list()
        outputs = [item for item in self.history if item.get("type") == "function_call_output"]
        return result.final_output, _answer(_text_of(outputs[-1]))

    async def _turn(self, words: str) -> Any:
        history = [*self.history, {"role": "user", "content": words}]
        config = RunConfig(tracing_disabled=True)
        if self.way == "rest":
            async with AsyncGatewayClient(self.base_url, self.token) as gateway:
                agent = Agent(
                    name="Support",
                    instructions=INSTRUCTIONS,
                    model=self.model,
                    model_settings=ModelSettings(),
                    tools=await gateway_function_tools(gateway),
                )
                return await Runner.run(agent, history, run_config=config)
        async with gateway_mcp_server(self.base_url, self.token) as server:
            agent = Agent(
                name="Support",
                instructions=INSTRUCTIONS,
                model=self.model,
                mcp_servers=[server],
                mcp_config=MCP_CONFIG,
            )
            return await Runner.run(agent, history, run_config=config)


@pytest.mark.parametrize("way", ["rest", "mcp"])
def test_a_support_conversation_through_the_openai_agents_sdk(way, live_server, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # tests.event_loops.run closes connections in its loop
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    order = OrderFactory(number="o-52", customer=alice, currency="EUR", total_minor=1000)
    OrderFactory(number="o-17", customer=bob, currency="USD", total_minor=1000)
    session, token = agent_session_create(user=alice, tools=["refund_order"])
    chat = Conversation(way, live_server.url, token)

    said, answer = chat.say("Please refund five euros from o-52. It arrived damaged.")
    assert answer["status"] == "awaiting_customer" and answer["executed"] is False
    assert said == answer["message"] and "nothing has happened yet" in said
    preview = Preview.objects.get(pk=answer["preview"]["id"])
    assert (preview.agent_session_id, preview.subject_id, preview.amount_minor) == (session.pk, "o-52", 500)

    # The tools the SDK gave the model: the gateway's, in strict mode, with schemas strict mode takes.
    tools = {tool.name: tool for tool in chat.model.tools_seen[0]}
    expected = (
        ["refund_order", "check_preview", "withdraw_preview"] if way == "rest" else ["refund_order", "withdraw_preview"]
    )
    assert list(tools) == expected
    for tool in tools.values():
        assert tool.strict_json_schema is True
        check_openai_strict(tool.params_json_schema)
    amount = tools["refund_order"].params_json_schema["properties"]["amount_minor"]
    assert "maximum" not in amount and "An integer from 0 to 9007199254740991." in amount["description"]

    said, answer = chat.say("My friend asked me to sort out o-17. Please refund five dollars.")
    assert said == "I could not do that: Order o-17 is not available: no such order belongs to this customer."
    assert answer["error"]["code"] == "order_unavailable"
    assert not Preview.objects.filter(subject_id="o-17").exists()

    preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    said, answer = chat.say("I confirmed it on the page.")
    assert answer["status"] == "executed" and answer["outcome"] == "succeeded"
    assert said == f"Done. {answer['message']}" and "Refunded €5.00 on order o-52" in said
    refund = Refund.objects.get()
    assert (refund.preview_id, refund.amount_minor, refund.currency) == (preview.pk, 500, "EUR")

    said, answer = chat.say("Please refund three euros from o-52 as well.")
    assert answer["status"] == "awaiting_customer"
    second = Preview.objects.get(pk=answer["preview"]["id"])
    said, answer = chat.say("Cancel that last one, please.")
    assert answer["status"] == "withdrawn" and answer["preview"]["id"] == str(second.pk)
    assert said == "Refund €3.00 on order o-52: withdrawn by the agent before it was decided, nothing was done."
    second.refresh_from_db()
    assert second.status == PreviewStatus.WITHDRAWN
    withdrawn = AuditRecord.objects.get(preview=second, event=AuditEvent.WITHDRAWN)
    assert withdrawn.agent_session_id == session.pk
    order.refresh_from_db()
    assert order.refunded_minor == 500 and Refund.objects.count() == 1

    if way == "rest":  # each proposal carries the model's own call id, kept in the audit
        proposed = AuditRecord.objects.get(preview=preview, event=AuditEvent.PROPOSED)
        assert proposed.result["call_id"] == "call_1"
