"""Glue for the OpenAI Agents SDK (`pip install "approval-gateway-client[openai-agents]"`).

Two ways in, with the same agent session token and the same rules:

- REST: `await gateway_function_tools(gateway)` gives the session's tools as the SDK's `FunctionTool`s, with
  the `openai-responses` strict schemas; each call is `gateway.propose(name, arguments, call_id=<the model's
  call id>)`, and a refusal the model can mend comes back to it as the tool's result. Beside them,
  `check_preview` (the real status, waiting briefly for a change) and `withdraw_preview`.
- MCP: `gateway_mcp_server(base_url, token)` is an `MCPServerStreamableHttp` for `/mcp` (the session's
  tools and `withdraw_preview`). It sends no `call_id`, so the same tool with the same arguments again is
  the same call, answered with the preview as it is now: that is how the model learns the outcome after
  the customer confirmed. Give the agent `mcp_config=MCP_CONFIG`: the SDK then hands the tools to the
  model in strict mode (the `mcp` schemas are already valid there).

Either way the agent's instructions should say what `INSTRUCTIONS` says: a tool call is a proposal.
"""

from __future__ import annotations

import json
from typing import Any

from agents import FunctionTool
from agents.mcp import MCPServerStreamableHttp
from agents.tool_context import ToolContext

from approval_gateway_client import Answer, AsyncGatewayClient

__all__ = [
    "INSTRUCTIONS",
    "MCP_CONFIG",
    "gateway_function_tools",
    "gateway_mcp_server",
]

INSTRUCTIONS = (
    "Each tool call is a proposal, never an action: nothing happens until a person approves the exact preview "
    "and the gateway's worker executes it. Relay the `message` the gateway answers with; say something was "
    "done only when the answer says `executed: true`. When a call is refused, read the error and correct the "
    "call, or tell the customer why it cannot be done. Withdraw a proposal the customer no longer wants."
)
# Agent(mcp_config=MCP_CONFIG): strict mode for the MCP tools (their schemas are strict-valid as listed).
MCP_CONFIG: dict[str, Any] = {"convert_schemas_to_strict": True}

CHECK_TOOL = "check_preview"
WITHDRAW_TOOL = "withdraw_preview"
CHECK_WAIT_SECONDS = 20
PREVIEW_ID_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "preview_id": {"type": "string", "format": "uuid", "description": "`preview.id` of the proposal's answer."}
    },
    "required": ["preview_id"],
    "additionalProperties": False,
}


def _result(answer: Answer) -> str:
    """What the model reads: the gateway's whole answer, a refusal with its code and numbers included."""
    return json.dumps(answer.body, ensure_ascii=False)


def _preview_id(arguments: str) -> str | None:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None
    value = parsed.get("preview_id") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else None


def _not_an_id() -> str:
    return json.dumps(
        {
            "ok": False,
            "executed": False,
            "error": {"code": "invalid_arguments", "message": 'Send {"preview_id": "<preview.id>"}.'},
        }
    )


def _proposal_tool(gateway: AsyncGatewayClient, definition: dict[str, Any]) -> FunctionTool:
    name = definition["name"]

    async def propose(context: ToolContext[Any], arguments: str) -> str:
        # The arguments go as the model wrote them: the gateway parses them strictly and audits them as sent.
        return _result(await gateway.propose(name, arguments, call_id=context.tool_call_id))

    return FunctionTool(
        name=name,
        description=definition["description"],
        params_json_schema=definition["parameters"],
        on_invoke_tool=propose,
        strict_json_schema=True,
    )


def _check_tool(gateway: AsyncGatewayClient) -> FunctionTool:
    async def check(context: ToolContext[Any], arguments: str) -> str:
        preview_id = _preview_id(arguments)
        if preview_id is None:
            return _not_an_id()
        return _result(await gateway.wait_for_outcome(preview_id, timeout=CHECK_WAIT_SECONDS))

    return FunctionTool(
        name=CHECK_TOOL,
        description="The real status of a proposal (waits up to 20 seconds for it to change). Report what it "
        "says: `executed: true` is the only proof that something was done.",
        params_json_schema=PREVIEW_ID_SCHEMA,
        on_invoke_tool=check,
        strict_json_schema=True,
    )


def _withdraw_tool(gateway: AsyncGatewayClient) -> FunctionTool:
    async def withdraw(context: ToolContext[Any], arguments: str) -> str:
        preview_id = _preview_id(arguments)
        if preview_id is None:
            return _not_an_id()
        return _result(await gateway.withdraw(preview_id))

    return FunctionTool(
        name=WITHDRAW_TOOL,
        description="Withdraw a proposal of yours that still waits for the customer's or staff's decision: it "
        "ends as withdrawn and nothing is done. A decided one cannot be withdrawn; the answer says its status.",
        params_json_schema=PREVIEW_ID_SCHEMA,
        on_invoke_tool=withdraw,
        strict_json_schema=True,
    )


async def gateway_function_tools(gateway: AsyncGatewayClient) -> list[FunctionTool]:
    """The session's tools over REST (strict schemas), then `check_preview` and `withdraw_preview`."""
    listing = await gateway.tools(format="openai-responses")
    return [
        *(_proposal_tool(gateway, definition) for definition in listing),
        _check_tool(gateway),
        _withdraw_tool(gateway),
    ]


def gateway_mcp_server(base_url: str, token: str, **options: Any) -> MCPServerStreamableHttp:
    """The gateway's `/mcp` as an MCP server of the SDK (use it as `async with`, or `connect()` it first).

    A proposal's answer reaches the model as the structured envelope (`ok`, `status`, `message`, …), a
    refusal as its text (`code: message (facts)`); the tools list is asked once per connection. `options`
    go to MCPServerStreamableHttp (e.g. `client_session_timeout_seconds`).
    """
    options.setdefault("name", "approval-gateway")
    options.setdefault("cache_tools_list", True)
    options.setdefault("use_structured_content", True)
    options.setdefault("client_session_timeout_seconds", 30)
    return MCPServerStreamableHttp(
        params={"url": base_url.rstrip("/") + "/mcp", "headers": {"Authorization": f"Bearer {token}"}},
        **options,
    )
