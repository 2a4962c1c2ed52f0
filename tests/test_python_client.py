"""Issue 37: the Python client hands the model's own mistakes back to the model as the tool's result (as MCP
does with an `isError` result), against a live gateway; what the model cannot mend still raises."""

import json

import httpx
import pytest
from approval_gateway_client import GatewayClient, GatewayError
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool

from approvals.core.services import agent_session_create
from approvals.models import Preview
from tests.factories import OrderFactory, UserFactory

OWN = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}


@pytest.fixture
def gateway(live_server, transactional_db):
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    _, token = agent_session_create(user=alice, tools=["refund_order"])
    with GatewayClient(live_server.url, token) as client:
        yield client


def test_malformed_arguments_are_an_answer_for_the_model(gateway):
    answer = gateway.propose("refund_order", {**OWN, "currency": "EUR"})
    assert answer.status_code == 400 and answer.ok is False and answer.executed is False
    assert answer.code == "invalid_arguments"
    assert "currency" in json.dumps(answer.body["error"])
    assert Preview.objects.count() == 0


def test_a_tool_the_session_lacks_and_an_unknown_tool_are_answers(gateway):
    lacking = gateway.propose("send_invoice", {"invoice_id": "INV-17", "recipient": "billing@example.test"})
    assert lacking.status_code == 403 and lacking.ok is False and lacking.code
    unknown = gateway.propose("refund_everything", {})
    assert unknown.status_code == 404 and unknown.ok is False and unknown.code
    assert lacking.message and unknown.message


def test_a_reused_key_with_another_body_is_an_answer(gateway):
    first = gateway.propose("refund_order", OWN, idempotency_key="key-1")
    assert first.status_code == 201 and first.ok
    again = gateway.propose("refund_order", {**OWN, "amount_minor": 400}, idempotency_key="key-1")
    assert again.status_code == 409 and again.ok is False and again.code


def test_a_policy_refusal_is_an_answer(gateway):
    answer = gateway.propose("refund_order", {**OWN, "amount_minor": 5000})
    assert answer.status_code == 422 and answer.code == "amount_exceeds_remaining"
    assert answer.body["error"]["remaining_minor"] == 1000


def test_a_preview_the_session_cannot_see_is_an_answer_and_waiting_for_it_stops_at_once(gateway):
    answer = gateway.wait_for_outcome("00000000-0000-0000-0000-000000000000", timeout=60)
    assert answer.status_code == 404 and answer.ok is False and answer.code


def test_a_bad_token_still_raises(live_server, transactional_db):
    with GatewayClient(live_server.url, "agt_not-a-token") as client, pytest.raises(GatewayError) as raised:
        client.propose("refund_order", OWN)
    assert raised.value.status_code == 401


@pytest.mark.parametrize("status", [429, 500, 503])
def test_throttling_and_server_errors_still_raise(status):
    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"ok": False, "error": {"code": "x", "message": "no"}})

    transport = httpx.Client(transport=httpx.MockTransport(server))
    with GatewayClient("http://gateway.test", "agt_x", http=transport) as client, pytest.raises(GatewayError):
        client.propose("refund_order", OWN)


class ModelThatAddsCurrency(BaseChatModel):
    """A model that puts `currency` into its first call, then repeats whatever the tool answered."""

    @property
    def _llm_type(self) -> str:
        return "adds-currency"

    def bind_tools(self, tools, **kwargs):  # noqa: ANN001, ANN201 - LangChain's signature
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # noqa: ANN001, ANN201
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=f"The gateway said: {last.content}")
        else:
            call = {"name": "refund_order", "args": {**OWN, "currency": "EUR"}, "id": "call_1"}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_the_langchain_example_hands_a_malformed_call_back_to_the_model(gateway):
    """docs/agents.md's LangChain example, with the model's first call carrying an extra `currency`."""
    definition = gateway.tools()["tools"][0]

    def refund_order(**arguments) -> dict:
        return gateway.propose("refund_order", arguments).body

    tools = [
        StructuredTool.from_function(
            refund_order,
            name="refund_order",
            description=definition["description"],
            args_schema=definition["input_schema"],
        )
    ]
    agent = create_agent(ModelThatAddsCurrency(), tools, system_prompt="Relay the gateway's message.")
    state = agent.invoke({"messages": [HumanMessage("Please refund five euros from o-12.")]})
    tool_message = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert "invalid_arguments" in tool_message.content and "currency" in tool_message.content
    assert state["messages"][-1].content.startswith("The gateway said: ")
    assert Preview.objects.count() == 0
