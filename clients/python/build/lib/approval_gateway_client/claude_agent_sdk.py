"""Glue for the Claude Agent SDK (`pip install "approval-gateway-client[claude-agent-sdk]"`), over MCP.

`gateway_options(base_url, token)` gives `ClaudeAgentOptions` for a support agent on the gateway: its `/mcp`
as the only MCP server (with the session's bearer token), every tool of that server allowed and nothing
else (no built-in tools: no shell, no files, no web), and instructions that say a tool call is a proposal.
Pass it to `query(prompt=..., options=...)` or `ClaudeSDKClient(options)`; other options go through.

The SDK drives the Claude Code CLI that its wheel bundles, which calls Anthropic's API: set
ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for a gateway of your own) in `env` or the process environment.
"""

from __future__ import annotations

from typing import Any

from claude_agent_sdk import ClaudeAgentOptions

__all__ = ["INSTRUCTIONS", "SERVER_NAME", "gateway_mcp_servers", "gateway_options", "tool_name"]

SERVER_NAME = "gateway"
INSTRUCTIONS = (
    "You help a customer of the shop. Each gateway tool call is a proposal, never an action: nothing happens "
    "until a person approves the exact preview and the gateway's worker executes it. Relay the `message` the "
    "gateway answers with; say something was done only when the answer says `executed: true`. When a call is "
    "refused, read the error and correct the call, or tell the customer why it cannot be done. Withdraw "
    "(withdraw_preview) a proposal the customer no longer wants."
)


def tool_name(name: str, server: str = SERVER_NAME) -> str:
    """How Claude Code names an MCP tool: `mcp__<server>__<tool>`."""
    return f"mcp__{server}__{name}"


def gateway_mcp_servers(base_url: str, token: str, server: str = SERVER_NAME) -> dict[str, Any]:
    """`mcp_servers` for ClaudeAgentOptions: the gateway's Streamable HTTP endpoint with the bearer token."""
    return {
        server: {
            "type": "http",
            "url": base_url.rstrip("/") + "/mcp",
            "headers": {"Authorization": f"Bearer {token}"},
        }
    }


def gateway_options(base_url: str, token: str, *, server: str = SERVER_NAME, **options: Any) -> ClaudeAgentOptions:
    """ClaudeAgentOptions with the gateway as the agent's only tools (see the module's docstring)."""
    options.setdefault("system_prompt", INSTRUCTIONS)
    options.setdefault("tools", [])  # no built-in tool at all
    options.setdefault("permission_mode", "dontAsk")  # what allowed_tools does not name is denied, never asked
    return ClaudeAgentOptions(
        mcp_servers=gateway_mcp_servers(base_url, token, server),
        strict_mcp_config=True,  # no other MCP server of the machine's settings
        allowed_tools=[f"mcp__{server}"],  # every tool of the gateway's server
        **options,
    )
