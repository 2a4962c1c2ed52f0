"""The Django view at /mcp: authenticate, throttle, read the envelope strictly, run the SDK for one request."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import anyio
import mcp_types as types
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from rest_framework import exceptions

from approvals.agents.api.authentication import AgentTokenAuthentication
from approvals.agents.api.calls import (
    body_unparsable,
)
from approvals.agents.api.errors import error_body
from approvals.agents.api.throttling import AgentThrottle
from approvals.agents.mcp_server.tools import BASE_URL_SCOPE_KEY, RAW_ARGUMENTS_SCOPE_KEY, SESSION_SCOPE_KEY, mcp_server
from approvals.core.errors import ErrorCode
from approvals.core.strict_json import StrictJSONError, member_text, strict_json_loads
from approvals.models import AgentSession

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


def _unauthorized(request: HttpRequest, message: str) -> JsonResponse:
    response = JsonResponse(
        error_body(
            "authentication_failed" if message else "not_authenticated",
            message or "Send the agent token (or an OAuth access token) as `Authorization: Bearer <token>`.",
        ),
        status=401,
    )
    response["WWW-Authenticate"] = AgentTokenAuthentication().authenticate_header(request)
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
        return _unauthorized(request, str(failure.detail))
    if authenticated is None:
        return _unauthorized(request, "")
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
