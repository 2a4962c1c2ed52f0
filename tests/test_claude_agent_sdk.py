"""Issue 37: the Claude Agent SDK (`query`, with the Claude Code CLI its wheel bundles) holds a support
conversation against a live gateway over MCP, set up by approval_gateway_client.claude_agent_sdk.

The CLI needs a model behind Anthropic's Messages API. Here it is a scripted one: a local HTTP server of this
file that speaks the Messages API (streamed server-sent events) and plays the assistant, pointed at by
ANTHROPIC_BASE_URL. No network, no key: everything between the model and the gateway is the real SDK, the
real CLI, its real MCP client and the gateway's /mcp.

    Customer: Please refund five euros from o-57. It arrived damaged. ... Actually, cancel it.
    Customer: My friend asked me to sort out o-17.        (Bob's order: refused, told as such)
"""

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from approval_gateway_client.claude_agent_sdk import INSTRUCTIONS, gateway_options, tool_name
from claude_agent_sdk import ResultMessage, query

from approvals.core.services import agent_session_create
from approvals.models import AuditEvent, AuditRecord, Preview, PreviewStatus
from tests.approvals.test_tool_formats import check_anthropic_strict
from tests.factories import OrderFactory, UserFactory

FIVE = {"order_id": "o-57", "amount_minor": 500, "reason": "damaged"}
FRIEND = {"order_id": "o-17", "amount_minor": 500, "reason": "damaged"}
REFUND_TOOL, WITHDRAW_TOOL = tool_name("refund_order"), tool_name("withdraw_preview")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        _text(block.get("content", "")) if block.get("type") == "tool_result" else block.get("text", "")
        for block in content
    )


def _envelope(result: str) -> dict[str, Any]:
    """A tool result as the gateway's envelope: the CLI hands the model an MCP result's structured content
    (the envelope as JSON), or the text of a refusal (`code: message (facts)`)."""
    try:
        return json.loads(result)
    except ValueError:
        code, _, message = result.partition(": ")
        return {"ok": False, "error": {"code": code, "message": message.split(" (")[0]}}


class ScriptedMessagesAPI:
    """A Messages API whose assistant calls the gateway's tools as the customer's words say, and afterwards
    says only what the tool answered. Requests without the gateway's tools (the CLI's own side questions)
    get a plain short answer. Every main request is kept (`requests`) to check what the CLI sent."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if self.path.startswith("/v1/messages/count_tokens"):
                    return self._send("application/json", json.dumps({"input_tokens": 1}).encode())
                blocks = api.reply(body)
                return self._send("text/event-stream", api.events(body.get("model", "claude"), blocks))

            def do_GET(self) -> None:  # noqa: N802
                self._send("application/json", b"{}", status=404)

            def _send(self, content_type: str, data: bytes, status: int = 200) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def reply(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        if REFUND_TOOL not in [tool.get("name") for tool in request.get("tools", [])]:
            return [{"type": "text", "text": "Support conversation"}]
        self.requests.append(request)
        last = [m for m in request["messages"] if m["role"] == "user"][-1]  # the CLI adds system ones after it
        results = [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            answer = _envelope(_text(results[-1].get("content", "")))
            if not answer["ok"]:
                return [{"type": "text", "text": f"I could not do that: {answer['error']['message']}"}]
            if "cancel it" in _text(request["messages"][0]["content"]) and answer["status"] != "withdrawn":
                return [self.tool_use(WITHDRAW_TOOL, {"preview_id": answer["preview"]["id"]})]
            return [{"type": "text", "text": answer["message"]}]
        words = _text(last["content"])
        if "o-57" in words:
            return [self.tool_use(REFUND_TOOL, FIVE)]
        if "o-17" in words:
            return [self.tool_use(REFUND_TOOL, FRIEND)]
        return [{"type": "text", "text": "How can I help?"}]

    def tool_use(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool_use", "id": f"toolu_{len(self.requests)}", "name": name, "input": arguments}

    @staticmethod
    def events(model: str, blocks: list[dict[str, Any]]) -> bytes:
        """The blocks as the streamed answer the SDKs read (message_start … message_stop)."""
        stop = "tool_use" if any(block["type"] == "tool_use" for block in blocks) else "end_turn"
        usage = {"input_tokens": 1, "output_tokens": 1}
        events: list[tuple[str, dict[str, Any]]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_scripted",
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": usage,
                    },
                },
            )
        ]
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [
                ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]
        events += [
            (
                "message_delta",
                {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage},
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


@pytest.fixture
def model() -> Iterator[ScriptedMessagesAPI]:
    api = ScriptedMessagesAPI()
    thread = threading.Thread(target=api.server.serve_forever, daemon=True)
    thread.start()
    yield api
    api.server.shutdown()
    api.server.server_close()


def ask(words: str, options: Any) -> str:
    """One query through the SDK; the final answer's text."""

    async def conversation() -> str:
        final = ""
        async for message in query(prompt=words, options=options):
            if isinstance(message, ResultMessage):
                final = message.result or ""
        return final

    return asyncio.run(conversation())


def test_a_support_conversation_through_the_claude_agent_sdk(live_server, model, tmp_path):
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    OrderFactory(number="o-57", customer=alice, currency="EUR", total_minor=1000)
    OrderFactory(number="o-17", customer=bob, currency="USD", total_minor=1000)
    session, token = agent_session_create(user=alice, tools=["refund_order"])
    options = gateway_options(
        live_server.url,
        token,
        cwd=str(tmp_path),
        setting_sources=[],
        max_turns=6,
        env={
            "ANTHROPIC_BASE_URL": model.url,
            "ANTHROPIC_API_KEY": "sk-ant-scripted",
            "HOME": str(tmp_path),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            # Anything the CLI would ask of the internet goes to a closed port: only local servers answer.
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9",
            "NO_PROXY": "127.0.0.1,localhost",
        },
    )

    said = ask("Please refund five euros from o-57. It arrived damaged. ... Actually, cancel it.", options)

    preview = Preview.objects.get(subject_id="o-57")
    assert preview.agent_session_id == session.pk and preview.status == PreviewStatus.WITHDRAWN
    assert said == "Refund €5.00 on order o-57: withdrawn by the agent before it was decided, nothing was done."
    assert AuditRecord.objects.get(preview=preview, event=AuditEvent.WITHDRAWN).agent_session_id == session.pk
    # What the CLI gave the model: the gateway's tools only (no built-in one), with strict-valid schemas.
    first = model.requests[0]
    assert first["system"] and INSTRUCTIONS in json.dumps(first["system"])
    tools = {tool["name"]: tool for tool in first["tools"] if not tool.get("defer_loading")}  # the CLI's placeholder
    assert sorted(tools) == [REFUND_TOOL, WITHDRAW_TOOL]
    for tool in tools.values():
        check_anthropic_strict(tool["input_schema"])
    proposal = _envelope(_text([m for m in model.requests[1]["messages"] if m["role"] == "user"][-1]["content"]))
    assert proposal["status"] == "awaiting_customer" and proposal["preview"]["id"] == str(preview.pk)
    assert "nothing has happened yet" in proposal["message"]

    said = ask("My friend asked me to sort out o-17. Please refund five dollars.", options)
    assert said == "I could not do that: Order o-17 is not available: no such order belongs to this customer."
    assert not Preview.objects.filter(subject_id="o-17").exists()
    refused = AuditRecord.objects.get(event=AuditEvent.PROPOSAL_REFUSED)
    assert refused.agent_session_id == session.pk and refused.result["error"]["code"] == "order_unavailable"
