"""Tool definitions in the shape each model API takes, all from the one definition per action.

The contract's own shape (`{"tools": [{name, description, input_schema}]}`) carries the JSON Schema that
drf-spectacular generates from the action's argument serializer, the same serializer that parses the
call. Each other shape is a projection of it onto the keywords that API documents:

- `openai` (Chat Completions, `strict: true`) and `openai-responses`: strict mode takes a subset of JSON
  Schema. Bounds and lengths (`minimum`, `maximum`, `minLength`, `maxLength`) and formats other than
  the few it names are left out of the schema and said in the description instead; the parser still
  enforces every one of them, so a call outside them is refused with `invalid_arguments`.
- `anthropic` (Messages API, `strict: true`): strict tool use takes its own subset (the "JSON Schema
  limitations" of Anthropic's structured outputs): no numerical bounds, no string lengths, `minItems`
  only 0 or 1, ten string formats. The rest is said in the description, as for OpenAI.
- `mcp`: the MCP `Tool` shape (`inputSchema`) with annotations; an MCP client gets the same list from
  `tools/list` on `/mcp` (plus the engine's own `withdraw_preview`). MCP itself accepts any JSON Schema,
  but a host hands `inputSchema` to its model's API, OpenAI's or Anthropic's, in strict mode or not: so
  it carries only the keywords both strict modes take (OpenAI's list, which Anthropic's contains), and
  says the rest in the description.
- `gemini`: `functionDeclarations` whose `parameters` is the OpenAPI 3.0 Schema subset Gemini reads,
  which has no `additionalProperties` (unknown fields are still refused by the parser).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from approvals.agents.api.serializers import WithdrawPreviewArguments
from approvals.core.arguments import input_json_schema
from approvals.core.registry import Action, registry
from approvals.models import AgentSession

FORMATS = ("openai", "openai-responses", "anthropic", "mcp", "gemini")

# The engine's own MCP tool beside the actions' (over REST: POST /api/agent/previews/<id>/withdraw).
WITHDRAW_TOOL = "withdraw_preview"
WITHDRAW_TOOL_DESCRIPTION = (
    "Withdraw a proposal of this agent session that still waits for the customer's or staff's decision: it "
    "ends as withdrawn and nothing is done. Use it when the customer no longer wants it, or when another "
    "proposal on the same order or invoice replaces it. A preview that no longer waits (approved, executed, "
    "declined, rejected, expired, superseded) cannot be withdrawn: the answer says its status."
)

# OpenAI's strict mode: the keywords it documents for function parameters, and the string formats.
OPENAI_STRICT_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "const",
        "anyOf",
        "items",
        "pattern",
        "format",
        "$defs",
        "$ref",
    }
)
OPENAI_STRICT_FORMATS = frozenset(
    {
        "date-time",
        "time",
        "date",
        "duration",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "uuid",
    }
)
# Anthropic's strict tool use (structured outputs, "JSON Schema limitations"): the supported keywords, the
# string formats, and the only `minItems` values it takes.
ANTHROPIC_STRICT_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "const",
        "default",
        "anyOf",
        "allOf",
        "items",
        "minItems",
        "pattern",
        "format",
        "$defs",
        "definitions",
        "$ref",
    }
)
ANTHROPIC_STRICT_FORMATS = frozenset(
    {
        "date-time",
        "time",
        "date",
        "duration",
        "email",
        "hostname",
        "uri",
        "ipv4",
        "ipv6",
        "uuid",
    }
)
ANTHROPIC_MIN_ITEMS = frozenset({0, 1})
# What an MCP host may hand to either model API in strict mode: the keywords and formats both take.
MCP_KEYWORDS = OPENAI_STRICT_KEYWORDS & ANTHROPIC_STRICT_KEYWORDS
MCP_FORMATS = OPENAI_STRICT_FORMATS & ANTHROPIC_STRICT_FORMATS
# Gemini's Schema object (an OpenAPI 3.0 subset).
GEMINI_KEYWORDS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    }
)
GEMINI_FORMATS = {"integer": {"int32", "int64"}, "number": {"float", "double"}, "string": {"enum", "date-time"}}


def session_actions(session: AgentSession) -> list[Action]:
    """The actions this session may call, in the session's order."""
    return [action for name in session.tools if (action := registry.action(name)) is not None]


def tool_definition(action: Action) -> dict[str, Any]:
    """The contract's shape: name, description and the serializer's JSON Schema."""
    return {
        "name": action.name,
        "description": action.description,
        "input_schema": input_json_schema(action.arguments_serializer),
    }


def withdraw_tool_definition() -> dict[str, Any]:
    """`withdraw_preview` in the contract's shape (its arguments: WithdrawPreviewArguments)."""
    return {
        "name": WITHDRAW_TOOL,
        "description": WITHDRAW_TOOL_DESCRIPTION,
        "input_schema": input_json_schema(WithdrawPreviewArguments),
    }


WITHDRAW_TOOL_ANNOTATIONS = {
    "title": "Withdraw a pending proposal",
    "readOnlyHint": False,
    "destructiveHint": False,  # it only ends a proposal nobody decided; nothing outside changes
    "idempotentHint": True,
    "openWorldHint": False,
}


def tool_annotations(action: Action) -> dict[str, Any]:
    """MCP tool annotations (hints to clients; the server itself trusts none coming in)."""
    return {
        "title": action.description.split(".")[0][:80] or action.name,
        "readOnlyHint": False,
        "destructiveHint": bool(getattr(action, "destructive_hint", True)),
        "idempotentHint": bool(getattr(action, "idempotent_hint", False)),
        "openWorldHint": True,
    }


def _constraint_words(node: dict[str, Any], kind: str | None) -> str:
    """What the dropped keywords of a node of type `kind` said, in words for the model."""
    words = []
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and high is not None:
        words.append(f"An integer from {low} to {high}." if kind == "integer" else f"From {low} to {high}.")
    elif low is not None:
        words.append(f"At least {low}.")
    elif high is not None:
        words.append(f"At most {high}.")
    shortest, longest = node.get("minLength"), node.get("maxLength")
    if shortest is not None and longest is not None:
        words.append(f"{shortest} to {longest} characters.")
    elif longest is not None:
        words.append(f"At most {longest} characters.")
    elif shortest is not None:
        words.append(f"At least {shortest} characters.")
    fewest, most = node.get("minItems"), node.get("maxItems")
    if fewest is not None and most is not None:
        words.append(f"{fewest} to {most} items.")
    elif most is not None:
        words.append(f"At most {most} items.")
    elif fewest is not None:
        words.append(f"At least {fewest} items.")
    return " ".join(words)


def _project(node: Any, *, keep: Callable[[str, Any, dict[str, Any]], bool]) -> Any:
    """`node` with only the keywords `keep` allows, recursively, the dropped constraints said in words."""
    if not isinstance(node, dict):
        return node
    result: dict[str, Any] = {}
    for key, value in node.items():
        if not keep(key, value, node):
            continue
        if key in ("properties", "$defs", "definitions"):
            result[key] = {name: _project(child, keep=keep) for name, child in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            result[key] = _project(value, keep=keep)
        elif key in ("anyOf", "allOf"):
            result[key] = [_project(child, keep=keep) for child in value]
        else:
            result[key] = copy.deepcopy(value)
    dropped = {key: value for key, value in node.items() if key not in result}
    words = _constraint_words(dropped, node.get("type"))
    if words:
        description = result.get("description", "")
        result["description"] = f"{description} {words}".strip() if description else words
    return result


def _strict_schema(schema: dict[str, Any], keywords: frozenset[str], formats: frozenset[str]) -> dict[str, Any]:
    def keep(key: str, value: Any, node: dict[str, Any]) -> bool:
        if key == "format":
            return value in formats
        if key == "minItems" and key in keywords:
            return value in ANTHROPIC_MIN_ITEMS
        return key in keywords

    return _project(schema, keep=keep)


def strict_openai_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return _strict_schema(schema, OPENAI_STRICT_KEYWORDS, OPENAI_STRICT_FORMATS)


def strict_anthropic_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return _strict_schema(schema, ANTHROPIC_STRICT_KEYWORDS, ANTHROPIC_STRICT_FORMATS)


def mcp_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return _strict_schema(schema, MCP_KEYWORDS, MCP_FORMATS)


def gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    def keep(key: str, value: Any, node: dict[str, Any]) -> bool:
        if key == "format":
            return value in GEMINI_FORMATS.get(node.get("type", ""), set())
        return key in GEMINI_KEYWORDS

    # Gemini says nothing of lengths and bounds it ignores; it documents these, so they stay as they are.
    return _project(schema, keep=keep)


def _openai(tools: list[dict[str, Any]], actions: list[Action]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": strict_openai_schema(t["input_schema"]),
                "strict": True,
            },
        }
        for t in tools
    ]


def _openai_responses(tools: list[dict[str, Any]], actions: list[Action]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": t["name"],
            "description": t["description"],
            "parameters": strict_openai_schema(t["input_schema"]),
            "strict": True,
        }
        for t in tools
    ]


def _anthropic(tools: list[dict[str, Any]], actions: list[Action]) -> list[dict[str, Any]]:
    return [
        {
            "name": t["name"],
            "description": t["description"],
            "input_schema": strict_anthropic_schema(t["input_schema"]),
            "strict": True,
        }
        for t in tools
    ]


def _mcp(tools: list[dict[str, Any]], actions: list[Action]) -> dict[str, Any]:
    return {
        "tools": [
            {
                "name": t["name"],
                "description": t["description"],
                "inputSchema": mcp_schema(t["input_schema"]),
                "annotations": tool_annotations(action),
            }
            for t, action in zip(tools, actions, strict=True)
        ]
    }


def _gemini(tools: list[dict[str, Any]], actions: list[Action]) -> list[dict[str, Any]]:
    declarations = [
        {"name": t["name"], "description": t["description"], "parameters": gemini_schema(t["input_schema"])}
        for t in tools
    ]
    return [{"functionDeclarations": declarations}]


# Each format's projection of the contract's tool definitions (and of the actions, for MCP's annotations).
LISTINGS: dict[str, Callable[[list[dict[str, Any]], list[Action]], Any]] = {
    "openai": _openai,
    "openai-responses": _openai_responses,
    "anthropic": _anthropic,
    "mcp": _mcp,
    "gemini": _gemini,
}


def tool_listing(session: AgentSession, output: str | None) -> Any:
    """The session's tools in the shape `output` names (None: the contract's own shape)."""
    actions = session_actions(session)
    tools = [tool_definition(action) for action in actions]
    if output is None:
        return {"tools": tools}
    if output not in LISTINGS:
        raise ValueError(f"Unknown format {output!r}")
    return LISTINGS[output](tools, actions)
