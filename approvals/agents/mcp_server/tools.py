"""The MCP server's tools: listing the session's tools, calling one through the REST API's `tool_call`,
the URL-mode elicitation of the customer's confirmation, and the engine's own `withdraw_preview` (the
REST API's `withdraw_call`). Input schemas are the `mcp` format's (approvals.agents.api.formats)."""

from __future__ import annotations

import functools
import json
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.core import signing
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from approvals.agents.api.calls import (
    IDEMPOTENCY_KEY,
    CallAnswer,
    audit_rejected_call,
    current_answer,
    preview_of_session,
    storable,
    tool_call,
    withdraw_call,
)
from approvals.agents.api.errors import error_body
from approvals.agents.api.formats import (
    WITHDRAW_TOOL,
    WITHDRAW_TOOL_ANNOTATIONS,
    mcp_schema,
    session_actions,
    tool_annotations,
    tool_definition,
    withdraw_tool_definition,
)
from approvals.agents.api.serializers import WithdrawPreviewArguments
from approvals.agents.mcp_server.confirmation import confirmation_request_words, not_confirmed_words
from approvals.core.digests import digest_of
from approvals.core.errors import ErrorCode
from approvals.core.presentation import preview_envelope
from approvals.core.registry import registry
from approvals.core.strict_json import StrictJSONError, strict_json_loads
from approvals.models import AgentSession, AuditEvent, IdempotencyRecord, PreviewStatus

SESSION_SCOPE_KEY = "approvals.agent_session"
BASE_URL_SCOPE_KEY = "approvals.base_url"
RAW_ARGUMENTS_SCOPE_KEY = "approvals.raw_arguments"
CALL_ID_META_KEY = "call_id"
REQUEST_STATE_SALT = "approvals.mcp.request_state"
REQUEST_STATE_MAX_AGE_SECONDS = 7 * 24 * 3600
CONFIRM_REQUEST_KEY = "customer_confirmation"

INSTRUCTIONS = (
    "Each tool proposes an action for the signed-in person; nothing happens until a person approves "
    "the exact preview and a worker executes it. Report only what the result says happened."
)


# Tool handlers ------------------------------------------------------------------------------------


def _scope(ctx: Any) -> dict[str, Any]:
    request = ctx.request
    return request.scope if request is not None else {}


def _agent_session(ctx: Any) -> AgentSession:
    session = _scope(ctx).get(SESSION_SCOPE_KEY)
    if session is None:  # never: the view authenticates before the SDK sees the request
        raise MCPError(code=types.INVALID_REQUEST, message="Not authenticated.")
    return session


def _tool(definition: dict[str, Any], hints: dict[str, Any]) -> types.Tool:
    return types.Tool(
        name=definition["name"],
        description=definition["description"],
        input_schema=mcp_schema(definition["input_schema"]),
        annotations=types.ToolAnnotations(
            title=hints["title"],
            read_only_hint=hints["readOnlyHint"],
            destructive_hint=hints["destructiveHint"],
            idempotent_hint=hints["idempotentHint"],
            open_world_hint=hints["openWorldHint"],
        ),
    )


def _tools_of(session: AgentSession) -> list[types.Tool]:
    """The session's actions, then `withdraw_preview` (every session may take back its own proposals)."""
    tools = [_tool(tool_definition(action), tool_annotations(action)) for action in session_actions(session)]
    return [*tools, _tool(withdraw_tool_definition(), WITHDRAW_TOOL_ANNOTATIONS)]


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    session = _agent_session(ctx)
    return types.ListToolsResult(tools=await sync_to_async(_tools_of)(session))


def _request_state(session: AgentSession, preview_id: str) -> str:
    return signing.dumps({"preview": preview_id, "session": session.pk}, salt=REQUEST_STATE_SALT, compress=True)


def _preview_id_from_state(session: AgentSession, state: str) -> str | None:
    try:
        data = signing.loads(state, salt=REQUEST_STATE_SALT, max_age=REQUEST_STATE_MAX_AGE_SECONDS)
    except signing.BadSignature:
        return None
    if not isinstance(data, dict) or data.get("session") != session.pk:
        return None
    return data.get("preview")


def _implicit_key(tool_name: str, arguments: Any) -> str:
    """Without a call id, the same tool and arguments within one agent session are the same call."""
    return "mcp-call:" + digest_of({"name": tool_name, "arguments": arguments})


def _answer_call(
    session: AgentSession,
    tool_name: str,
    arguments: Any,
    call_id: str | None,
    base_url: str,
    state: str | None,
    raw_arguments: str | None = None,
) -> CallAnswer:
    """The database side of tools/call, in the request's thread. `raw_arguments` is the arguments' text
    as received: it is parsed with the REST API's strict rules (the SDK's own parse takes duplicate keys,
    the last one winning), and it is what the audit keeps."""
    if state is not None:
        return _answer_from_state(session, state, call_id, base_url)
    if raw_arguments is not None:
        try:
            arguments = strict_json_loads(raw_arguments)
        except StrictJSONError:
            # Refused by tool_call, which parses the text again, strictly, and audits it as received.
            return tool_call(
                session=session,
                tool_name=tool_name,
                arguments=raw_arguments,
                call_id=call_id,
                idempotency_key=None,
                base_url=base_url,
            )
    if call_id is not None:
        return _answer_keyed(session, tool_name, arguments, call_id, base_url, raw_arguments)
    return _answer_implicitly_keyed(session, tool_name, arguments, base_url, raw_arguments)


def _answer_from_state(session: AgentSession, state: str, call_id: str | None, base_url: str) -> CallAnswer:
    """The retry of an elicitation: the preview its signed request_state names, as it stands now."""
    preview_id = _preview_id_from_state(session, state)
    preview = preview_of_session(session, preview_id) if preview_id else None
    if preview is None:
        body = error_body(
            "invalid_request_state",
            "The request_state is not one this server gave this agent session; call the tool again.",
        )
        return CallAnswer(400, body)
    body = preview_envelope(preview, base_url=base_url)
    if call_id is not None:
        body["call_id"] = call_id
    return CallAnswer(200, body, replayed=True)


def _answer_keyed(
    session: AgentSession, tool_name: str, arguments: Any, call_id: str, base_url: str, raw_arguments: str | None
) -> CallAnswer:
    # The call id is the idempotency key, as an Idempotency-Key header would be; one that could not be
    # a header (too long, not visible ASCII) is keyed by its digest.
    key = call_id if IDEMPOTENCY_KEY.match(call_id) else "mcp-call-id:" + digest_of(call_id)
    answer = tool_call(
        session=session,
        tool_name=tool_name,
        arguments=arguments,
        call_id=call_id,
        idempotency_key=key,
        base_url=base_url,
        raw_arguments=raw_arguments,
    )
    if answer.replayed:
        return current_answer(answer, session=session, base_url=base_url, call_id=call_id)
    return answer


def _answer_implicitly_keyed(
    session: AgentSession, tool_name: str, arguments: Any, base_url: str, raw_arguments: str | None
) -> CallAnswer:
    """Without a call id, the same tool with the same arguments within a session is the same call."""
    key = _implicit_key(tool_name, arguments)
    earlier = IdempotencyRecord.objects.filter(agent_session=session, key=key).first()
    if earlier is not None:
        return current_answer(
            CallAnswer(200, earlier.response_body, replayed=True), session=session, base_url=base_url, call_id=None
        )
    answer = tool_call(
        session=session,
        tool_name=tool_name,
        arguments=arguments,
        call_id=None,
        idempotency_key=None,
        base_url=base_url,
        raw_arguments=raw_arguments,
    )
    if answer.preview_id is not None:
        # Remembered only for a call that made (or found) a preview: a refused call is checked again.
        IdempotencyRecord.objects.get_or_create(
            agent_session=session,
            key=key,
            defaults={
                "request_fingerprint": digest_of({"name": tool_name, "arguments": arguments}),
                "response_status": answer.http_status,
                "response_body": answer.body,
            },
        )
    return answer


def _answer_withdraw(session: AgentSession, arguments: Any, call_id: str | None, base_url: str) -> CallAnswer:
    """The database side of `withdraw_preview`: its arguments parsed strictly (refused as any tool's
    malformed arguments are, audited), then the REST API's withdrawal."""
    parsed = WithdrawPreviewArguments(data=arguments)
    if not isinstance(arguments, dict) or not parsed.is_valid():
        errors = parsed.errors if isinstance(arguments, dict) else {"arguments": ["A JSON object is required."]}
        body = storable(
            error_body(
                ErrorCode.INVALID_ARGUMENTS, "The arguments do not match the tool's input schema.", fields=errors
            )
        )
        audit_rejected_call(
            session=session,
            event=AuditEvent.PROPOSAL_INVALID,
            tool_name=WITHDRAW_TOOL,
            raw_arguments=storable(json.dumps(arguments, ensure_ascii=False, default=str)),
            error=body["error"],
            call_id=storable(call_id),
        )
        if call_id is not None:
            body["call_id"] = call_id
        return CallAnswer(400, body)
    preview_id = parsed.validated_data["preview_id"]
    return withdraw_call(session=session, preview_id=preview_id, base_url=base_url, call_id=call_id)


def _facts_text(error: dict[str, Any]) -> str:
    facts = [
        f"{name}={value}"
        for name, value in error.items()
        if name not in ("code", "message", "fields") and isinstance(value, int | str)
    ]
    return f" ({', '.join(facts)})" if facts else ""


def _text(body: dict[str, Any]) -> str:
    if not body.get("ok", False):
        error = body["error"]
        text = f"{error['code']}: {error['message']}{_facts_text(error)}"
        if error.get("fields"):
            text += " " + json.dumps(error["fields"], ensure_ascii=False)
        return text
    return body.get("message", "")


def _tool_result(body: dict[str, Any], text: str | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text or _text(body))],
        structured_content=body,
        is_error=not body.get("ok", False),
    )


def _elicits_url(ctx: Any) -> bool:
    wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability(url=types.UrlElicitationCapability()))
    try:
        return bool(ctx.session.check_client_capability(wanted))
    except Exception:  # noqa: BLE001 - no capabilities known: treat as none declared
        return False


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
    session = _agent_session(ctx)
    base_url = _scope(ctx).get(BASE_URL_SCOPE_KEY, "/")
    meta = params.meta or {}
    call_id = meta.get(CALL_ID_META_KEY)
    if call_id is not None and not isinstance(call_id, str):
        call_id = json.dumps(call_id)
    arguments = params.arguments if params.arguments is not None else {}
    if params.name == WITHDRAW_TOOL:
        answer = await sync_to_async(_answer_withdraw)(session, arguments, call_id, base_url)
        return _tool_result(answer.body)
    retrying = params.input_responses is not None or params.request_state is not None
    raw_arguments = _scope(ctx).get(RAW_ARGUMENTS_SCOPE_KEY)
    answer = await sync_to_async(_answer_call)(
        session, params.name, arguments, call_id, base_url, params.request_state, raw_arguments
    )
    body = answer.body
    if not body.get("ok", False) and body["error"]["code"] in (ErrorCode.UNKNOWN_TOOL, ErrorCode.TOOL_NOT_ALLOWED):
        # Not one of this session's tools: as for any tool the server does not list, a protocol error.
        raise MCPError(code=types.INVALID_PARAMS, message=body["error"]["message"], data=body["error"])
    if body.get("ok") and body.get("status") == PreviewStatus.AWAITING_CUSTOMER and not retrying and _elicits_url(ctx):
        message = await sync_to_async(confirmation_request_words)(body["preview"]["id"])
        return types.InputRequiredResult(
            input_requests={
                CONFIRM_REQUEST_KEY: types.ElicitRequest(
                    params=types.ElicitRequestURLParams(message=message, url=body["preview"]["confirm_url"])
                )
            },
            request_state=_request_state(session, body["preview"]["id"]),
        )
    if params.input_responses is not None:
        response = params.input_responses.get(CONFIRM_REQUEST_KEY)
        action = response.action if isinstance(response, types.ElicitResult) else None
        return _tool_result(body, await sync_to_async(not_confirmed_words)(body, action))
    return _tool_result(body)


@functools.cache
def _input_schema(tool_name: str) -> dict[str, Any] | None:
    """A tool's input schema without the database (it is the action's, whoever calls): the SDK checks
    `Mcp-Param-*` headers against it, which would otherwise list the session's tools for every call."""
    if tool_name == WITHDRAW_TOOL:
        return mcp_schema(withdraw_tool_definition()["input_schema"])
    action = registry.action(tool_name)
    return mcp_schema(tool_definition(action)["input_schema"]) if action is not None else None


_server: Server | None = None


def mcp_server() -> Server:
    global _server
    if _server is None:
        _server = Server(
            "approval-gateway",
            version="1",
            instructions=INSTRUCTIONS,
            get_tool_input_schema=_input_schema,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )
    return _server
