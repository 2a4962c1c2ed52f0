"""The MCP server at /mcp: the agent API's tools over the Model Context Protocol (revision 2026-07-28).

Built on the official `mcp` SDK's low-level `Server`, served statelessly with JSON responses over
Streamable HTTP (`StreamableHTTPSessionManager(stateless=True, json_response=True)`). It is a Django view,
so `config.wsgi:application` serves it on the same host and port as the REST API, through the same
middleware (request ids, metrics, logs, ALLOWED_HOSTS), under runserver, gunicorn's sync workers and the
test server alike, with no second process.

How the SDK's ASGI app runs inside a WSGI request: the view answers each POST by running the SDK for
that one request in an event loop (`async_to_sync`), and the tool handlers do their database work with
`sync_to_async`, which asgiref runs back in the request's own thread. So the ORM works exactly as in a
REST view: the thread's own connection, its CONN_MAX_AGE and health checks, one transaction per
service call, and the connection Django closes when the request finishes. (Adapting the SDK's ASGI app
with a2wsgi would run the handlers on a long-lived event loop in another thread, whose database
connections Django never closes, and outside the request's middleware.) Nothing outlives a request:
each one gets a fresh session manager, which in stateless mode holds no state anyway, so there is
nothing to open after a fork.

What the server does:
- The bearer agent token authenticates the request exactly as on the REST API (401 otherwise); the
  token's session decides the actor and the tools, whatever the request says.
- `tools/list` is exactly the session's tools, with input schemas from the same serializers and
  annotations (`destructiveHint`, `idempotentHint`).
- `tools/call` goes through `approvals.agents.api.calls.tool_call`, as `POST /api/agent/tool-calls` does: the
  same parsing, policy, idempotency and audit. A `call_id` in the request's `_meta` is the idempotency
  key (as the REST `Idempotency-Key`), echoed and audited; without one the same arguments within the
  session stand for the same call. A repeated call answers with the preview as it stands now, so the
  same call after the decision reports the executor's outcome.
- A refusal is a result with `isError`, its code and its numbers in the text and the structured content.
- A preview waiting for the customer answers with an `InputRequiredResult` holding a URL-mode
  elicitation of the confirmation page (which only the preview's actor can use); the client's retry
  (with `input_responses` and the echoed signed `request_state`) answers with the preview's state. A
  client that declared no elicitation gets the same state with the URL in the text.
"""

from __future__ import annotations

import functools
import json
from collections.abc import MutableMapping
from typing import Any

import anyio
import mcp_types as types
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core import signing
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from rest_framework import exceptions

from approvals.agents.api.authentication import AgentTokenAuthentication
from approvals.agents.api.calls import (
    IDEMPOTENCY_KEY,
    CallAnswer,
    body_unparsable,
    current_answer,
    preview_of_session,
    tool_call,
)
from approvals.agents.api.errors import error_body
from approvals.agents.api.formats import session_actions, tool_annotations, tool_definition
from approvals.agents.api.throttling import AgentThrottle
from approvals.core.digests import digest_of
from approvals.core.errors import ErrorCode
from approvals.core.presentation import preview_envelope
from approvals.core.registry import registry
from approvals.core.strict_json import StrictJSONError, member_text, strict_json_loads
from approvals.models import AgentSession, IdempotencyRecord, PreviewStatus

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


def _tools_of(session: AgentSession) -> list[types.Tool]:
    tools = []
    for action in session_actions(session):
        definition, hints = tool_definition(action), tool_annotations(action)
        tools.append(
            types.Tool(
                name=definition["name"],
                description=definition["description"],
                input_schema=definition["input_schema"],
                annotations=types.ToolAnnotations(
                    title=hints["title"],
                    read_only_hint=hints["readOnlyHint"],
                    destructive_hint=hints["destructiveHint"],
                    idempotent_hint=hints["idempotentHint"],
                    open_world_hint=hints["openWorldHint"],
                ),
            )
        )
    return tools


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


def _tool_result(body: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=_text(body))],
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
        return types.InputRequiredResult(
            input_requests={
                CONFIRM_REQUEST_KEY: types.ElicitRequest(
                    params=types.ElicitRequestURLParams(message=body["message"], url=body["preview"]["confirm_url"])
                )
            },
            request_state=_request_state(session, body["preview"]["id"]),
        )
    return _tool_result(body)


@functools.cache
def _input_schema(tool_name: str) -> dict[str, Any] | None:
    """A tool's input schema without the database (it is the action's, whoever calls): the SDK checks
    `Mcp-Param-*` headers against it, which would otherwise list the session's tools for every call."""
    action = registry.action(tool_name)
    return tool_definition(action)["input_schema"] if action is not None else None


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


# The Django view ---------------------------------------------------------------------------------


async def _serve(scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Run the SDK's stateless Streamable HTTP app for one request; returns status, headers and body."""
    manager = StreamableHTTPSessionManager(app=mcp_server(), json_response=True, stateless=True)
    started: dict[str, Any] = {}
    chunks: list[bytes] = []
    done = anyio.Event()
    body_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    async with manager.run():
        await manager.handle_request(scope, receive, send)
    done.set()
    return started.get("status", 500), list(started.get("headers", [])), b"".join(chunks)


def _asgi_scope(request: HttpRequest, session: AgentSession) -> dict[str, Any]:
    headers = []
    for key, value in request.META.items():
        if key.startswith("HTTP_"):
            name = key[5:].replace("_", "-").lower()
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            name = key.replace("_", "-").lower()
        else:
            continue
        if isinstance(value, str) and value:
            headers.append((name.encode("latin-1"), value.encode("latin-1", "replace")))
    host = request.get_host()
    server_name, _, port = host.rpartition(":") if host.rpartition(":")[2].isdigit() else (host, "", "")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode("latin-1", "replace"),
        "root_path": "",
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1", "replace"),
        "headers": headers,
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
        "server": (server_name or host, int(port) if port else (443 if request.is_secure() else 80)),
        "state": {},
        SESSION_SCOPE_KEY: session,
        BASE_URL_SCOPE_KEY: request.build_absolute_uri("/"),
    }


def _unauthorized(message: str) -> JsonResponse:
    response = JsonResponse(
        error_body(
            "authentication_failed" if message else "not_authenticated",
            message or "Send the agent token as `Authorization: Bearer <token>`.",
        ),
        status=401,
    )
    response["WWW-Authenticate"] = AgentTokenAuthentication().authenticate_header(None)
    return response


class _Throttled:
    """What the agent API's throttles read of a request."""

    def __init__(self, session: AgentSession) -> None:
        self.auth = session


def _throttle_wait(session: AgentSession) -> float | None:
    throttle = AgentThrottle()
    # The throttle reads only request.auth of a request; this endpoint has no DRF request or view.
    if not throttle.allow_request(_Throttled(session), None):  # type: ignore[arg-type]  # stand-ins for both
        return throttle.wait()
    return None


def _strict_envelope_refusal(body: bytes, scope: dict[str, Any], session: AgentSession) -> HttpResponse | None:
    """Hold the message to the REST API's JSON rules before the SDK reads it (duplicate keys, NaN,
    absurd nesting, lone surrogates), and keep the text of a tools/call's arguments for the call.

    A message whose envelope breaks them is a JSON-RPC parse error, audited like a REST body that is not
    JSON. The arguments are left to the call (a result with `invalid_arguments`, as for any malformed
    arguments), which parses their text strictly and audits it as received."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None  # the SDK answers a body that is not UTF-8 with its own parse error
    raw_arguments = member_text(text, "params", "arguments")
    if raw_arguments is not None:
        scope[RAW_ARGUMENTS_SCOPE_KEY] = raw_arguments
    envelope = text.replace(raw_arguments, "null", 1) if raw_arguments is not None else text
    try:
        strict_json_loads(envelope)
    except StrictJSONError as error:
        body_unparsable(session=session, raw_body=text, code=ErrorCode.MALFORMED_REQUEST, message=str(error))
        answer = {"jsonrpc": "2.0", "id": None, "error": {"code": types.PARSE_ERROR, "message": str(error)}}
        return JsonResponse(answer, status=400)
    return None


@csrf_exempt
def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    """POST /mcp: one MCP message (stateless Streamable HTTP, JSON responses)."""
    try:
        request.get_host()  # ALLOWED_HOSTS, as for every other view: DNS rebinding gets a 400
    except DisallowedHost:
        return JsonResponse(error_body(ErrorCode.BAD_HOST, "This host is not served here."), status=400)
    origin = request.headers.get("Origin")
    if origin and origin.rstrip("/") != request.build_absolute_uri("/").rstrip("/"):
        # The token is a bearer token a browser never sends by itself, but the specification asks
        # servers to refuse foreign origins all the same.
        return JsonResponse(error_body(ErrorCode.BAD_ORIGIN, "Cross-origin requests are not accepted."), status=403)
    try:
        # It reads only the Authorization header, which Django's request carries as DRF's does.
        authenticated = AgentTokenAuthentication().authenticate(request)  # type: ignore[arg-type]  # a Django request
    except exceptions.AuthenticationFailed as failure:
        return _unauthorized(str(failure.detail))
    if authenticated is None:
        return _unauthorized("")
    _user, session = authenticated
    wait = _throttle_wait(session)
    if wait is not None:
        seconds = max(int(wait + 0.999), 1)
        response: HttpResponse = JsonResponse(
            error_body(
                ErrorCode.THROTTLED, f"Too many calls; try again in {seconds} seconds.", retry_after_seconds=seconds
            ),
            status=429,
        )
        response["Retry-After"] = str(seconds)
        return response
    if request.method != "POST":
        # Stateless: no stream to GET and no session to DELETE.
        response = HttpResponse(status=405)
        response["Allow"] = "POST"
        return response
    try:
        body = request.body
    except RequestDataTooBig:
        return JsonResponse(
            error_body(
                ErrorCode.REQUEST_TOO_LARGE, f"The body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."
            ),
            status=413,
        )
    scope = _asgi_scope(request, session)
    refusal = _strict_envelope_refusal(body, scope, session)
    if refusal is not None:
        return refusal
    status, headers, content = async_to_sync(_serve)(scope, body)
    response = HttpResponse(content, status=status)
    for name, value in headers:
        header = name.decode("latin-1")
        if header.lower() not in ("content-length", "transfer-encoding", "connection"):
            response[header] = value.decode("latin-1")
    return response
