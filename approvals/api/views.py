"""The agent API: thin views that parse (every 400 comes from here) and call services."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from django.conf import settings
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..arguments import StrictCharField, StrictIntegerField, StrictSerializer, input_json_schema
from ..audit_seal import audit_seal, preview_receipt
from ..digests import digest_of
from ..errors import ApplicationError
from ..models import AuditEvent, Preview, RejectedCallKind
from ..presentation import preview_envelope
from ..registry import registry
from ..rejected_calls import SAMPLE_CHARACTERS, rejected_call_audit_due, rejected_call_count
from ..services import (
    IdempotencyConflict,
    agent_session_create,
    idempotent_call,
    preview_refresh,
    proposal_audit_rejected,
    proposal_submit,
)
from .authentication import AgentTokenAuthentication
from .errors import error_body, error_code
from .parsers import StrictJSONError, strict_json_loads
from .schema import (
    ARGUMENTS,
    AUTH_HEADERS,
    IDEMPOTENCY_KEY_PARAMETER,
    PREVIEW_ENVELOPE,
    PREVIEW_ID,
    THROTTLED,
    TOOL_LISTING,
    UNAUTHORIZED,
    error_response,
)
from .throttling import AgentSessionThrottle, AgentUserThrottle

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


class AgentAPIView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    throttle_classes = [AgentSessionThrottle, AgentUserThrottle]

    def base_url(self) -> str:
        return self.request.build_absolute_uri("/")

    def throttled(self, request: Request, wait: float | None) -> None:
        """Count the throttled call (and audit the first ones of the minute) before answering 429."""
        session = request.auth
        if session is not None:
            if request.method == "POST":
                try:
                    body = request._request.body.decode("utf-8", "replace")
                except Exception:  # noqa: BLE001 - an oversized or unreadable body: count the call anyway
                    body = ""
            else:
                body = request.get_full_path()
            count = rejected_call_count(
                agent_session=session, kind=RejectedCallKind.THROTTLED, body=body, code="throttled"
            )
            if rejected_call_audit_due(count):
                proposal_audit_rejected(
                    agent_session=session, event=AuditEvent.CALL_THROTTLED, tool_name="",
                    raw_arguments=storable(body[:SAMPLE_CHARACTERS]),
                    error={"code": "throttled", "calls_this_minute": count, "path": request.path[:200]},
                )
        super().throttled(request, wait)


def _audit_rejected_call(
    *, session: Any, event: AuditEvent, tool_name: str, raw_arguments: str, error: dict[str, Any]
) -> None:
    """Count a call refused before the policy; audit it in full only while few came this minute."""
    count = rejected_call_count(
        agent_session=session, kind=RejectedCallKind.MALFORMED, body=raw_arguments, code=str(error.get("code", ""))
    )
    if rejected_call_audit_due(count):
        proposal_audit_rejected(
            agent_session=session, event=event, tool_name=tool_name, raw_arguments=raw_arguments, error=error
        )


@extend_schema_field(ARGUMENTS)
class ArgumentsField(serializers.JSONField):
    """A JSON object, or a string holding one (as models emit tool calls)."""


class ToolCallSerializer(StrictSerializer):
    name = StrictCharField(max_length=64, help_text="The tool's name, from GET /api/agent/tools.")
    arguments = ArgumentsField(help_text="The tool's arguments: a JSON object or a string holding one.")
    call_id = StrictCharField(max_length=200, required=False, help_text="Your id for this call.")


def storable(value: Any) -> Any:
    """PostgreSQL text and jsonb cannot hold U+0000. What the audit keeps of a hostile call has it as
    U+FFFD instead, as for bytes that were not UTF-8; everything else stays exactly as received."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


def _raw_arguments(data: Any) -> str:
    arguments = data.get("arguments") if isinstance(data, dict) else None
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return json.dumps(arguments, ensure_ascii=False)


class ToolListView(AgentAPIView):
    @extend_schema(
        operation_id="list_tools",
        parameters=[
            OpenApiParameter("format", str, enum=["openai"], required=False,
                             description="`openai` lists the tools as OpenAI function definitions."),
            *AUTH_HEADERS,
        ],
        responses={
            200: TOOL_LISTING,
            400: error_response("An unknown `format`."),
            401: UNAUTHORIZED,
            429: THROTTLED,
        },
    )
    def get(self, request: Request) -> Response:
        output = request.query_params.get("format")
        if output is not None and output != "openai":
            return Response(
                error_body("invalid_request", f"Unknown format {output[:40]!r}; the only format is 'openai'."),
                status=status.HTTP_400_BAD_REQUEST,
            )
        tools = [
            {"name": a.name, "description": a.description, "input_schema": input_json_schema(a.arguments_serializer)}
            for name in request.auth.tools
            if (a := registry.action(name)) is not None
        ]
        if output == "openai":
            openai = [
                {
                    "type": "function",
                    "function": {
                        "name": t["name"],
                        "description": t["description"],
                        "parameters": t["input_schema"],
                        "strict": True,
                    },
                }
                for t in tools
            ]
            return Response(openai)
        return Response({"tools": tools})


class ToolCallView(AgentAPIView):
    @extend_schema(
        operation_id="propose_tool_call",
        request=ToolCallSerializer,
        parameters=[IDEMPOTENCY_KEY_PARAMETER, *AUTH_HEADERS],
        responses={
            200: OpenApiResponse(PREVIEW_ENVELOPE, description="A replay, or the same pending proposal again."),
            201: OpenApiResponse(PREVIEW_ENVELOPE, description="A new preview; nothing has happened yet."),
            400: error_response("Malformed body, envelope, arguments or Idempotency-Key."),
            401: UNAUTHORIZED,
            403: error_response("The tool is not allowed for this agent session."),
            404: error_response("There is no such tool."),
            409: error_response("The Idempotency-Key was used with a different body."),
            415: error_response("The body is not application/json."),
            422: error_response("The policy refused the proposal; the message states the rule and the numbers."),
            429: THROTTLED,
        },
    )
    def post(self, request: Request) -> Response:
        session = request.auth
        try:
            data = request.data
        except (ParseError, UnsupportedMediaType) as error:
            # Not even JSON: still a tool call from this session, audited with the body as received
            # and the error code the caller gets (malformed_request, unsupported_media_type).
            _audit_rejected_call(
                session=session, event=AuditEvent.PROPOSAL_INVALID, tool_name="",
                raw_arguments=storable(getattr(request, "raw_body_text", "")),
                error=storable({"code": error_code(error), "message": str(error.detail)}),
            )
            raise
        raw_arguments = _raw_arguments(data)
        tool_name = data.get("name") if isinstance(data, dict) else None
        tool_name = tool_name if isinstance(tool_name, str) else ""

        def reject(http_status: int, event: AuditEvent, code: str, message: str, **facts: Any) -> Response:
            body = storable(error_body(code, message, **facts))
            _audit_rejected_call(
                session=session, event=event, tool_name=storable(tool_name),
                raw_arguments=storable(raw_arguments), error=body["error"],
            )
            return Response(body, status=http_status)

        envelope = ToolCallSerializer(data=data)
        if not envelope.is_valid():
            return reject(400, AuditEvent.PROPOSAL_INVALID, "invalid_request",
                          "The tool call envelope is malformed.", fields=envelope.errors)
        action = registry.action(tool_name)
        if action is None:
            return reject(404, AuditEvent.PROPOSAL_INVALID, "unknown_tool", f"There is no tool named {tool_name!r}.")
        if tool_name not in session.tools:
            return reject(403, AuditEvent.PROPOSAL_FORBIDDEN, "tool_not_allowed",
                          f"This agent session may not use the tool {tool_name!r}.")
        arguments = envelope.validated_data["arguments"]
        if isinstance(arguments, str):
            try:
                arguments = strict_json_loads(arguments)
            except StrictJSONError as error:
                return reject(400, AuditEvent.PROPOSAL_INVALID, "invalid_arguments",
                              f"The arguments string is not valid JSON: {error}")
        if not isinstance(arguments, dict):
            return reject(400, AuditEvent.PROPOSAL_INVALID, "invalid_arguments",
                          "The arguments must be a JSON object.")
        parsed = action.arguments_serializer(data=arguments)
        if not parsed.is_valid():
            return reject(400, AuditEvent.PROPOSAL_INVALID, "invalid_arguments",
                          "The arguments do not match the tool's input schema.", fields=parsed.errors)
        call_id = envelope.validated_data.get("call_id")

        def propose() -> tuple[int, dict[str, Any]]:
            outcome = proposal_submit(
                agent_session=session, action=action,
                arguments=dict(parsed.validated_data), raw_arguments=raw_arguments,
            )
            if outcome.kind == "refused":
                body = error_body(**outcome.refusal.as_dict())
                http_status = status.HTTP_422_UNPROCESSABLE_ENTITY
            else:
                body = preview_envelope(outcome.preview, base_url=self.base_url())
                http_status = status.HTTP_201_CREATED if outcome.kind == "created" else status.HTTP_200_OK
            if call_id is not None:
                body["call_id"] = call_id
            return http_status, body

        key = request.headers.get("Idempotency-Key")
        if key is None:
            http_status, body = propose()
            return Response(body, status=http_status)
        if not IDEMPOTENCY_KEY.match(key):
            return reject(400, AuditEvent.PROPOSAL_INVALID, "invalid_idempotency_key",
                          "The Idempotency-Key header must be 1 to 255 visible ASCII characters.")
        fingerprint = digest_of({"name": tool_name, "arguments": arguments, "call_id": call_id})
        try:
            http_status, body = idempotent_call(
                agent_session=session, key=key, fingerprint=fingerprint, run=propose, action=tool_name
            )
        except IdempotencyConflict as conflict:
            return reject(409, AuditEvent.PROPOSAL_INVALID, conflict.code, conflict.message)
        return Response(body, status=http_status)


class PreviewStatusView(AgentAPIView):
    @extend_schema(
        operation_id="get_preview",
        parameters=[PREVIEW_ID, *AUTH_HEADERS],
        responses={
            200: OpenApiResponse(PREVIEW_ENVELOPE, description="The preview with its real status."),
            401: UNAUTHORIZED,
            404: error_response("No such preview of this person (the same answer for someone else's)."),
            429: THROTTLED,
        },
    )
    def get(self, request: Request, preview_id: str) -> Response:
        try:
            preview_uuid = uuid.UUID(preview_id)
        except ValueError as not_an_id:
            raise Http404 from not_an_id
        preview = Preview.objects.filter(pk=preview_uuid, actor=request.user).first()
        if preview is None:
            raise Http404
        preview = preview_refresh(preview=preview)
        return Response(preview_envelope(preview, base_url=self.base_url()))


class PreviewReceiptView(AgentAPIView):
    @extend_schema(
        operation_id="get_preview_receipt",
        parameters=[PREVIEW_ID, *AUTH_HEADERS],
        responses={
            200: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="The preview's audit records with Merkle inclusion proofs against an Ed25519-signed "
                "tree head (docs/audit.md; check one with `manage.py verify_receipt`). Records not sealed yet "
                "are counted in `unsealed_records`: ask again a second later.",
            ),
            401: UNAUTHORIZED,
            404: error_response("No such preview of this agent session (the same answer for another's)."),
            429: THROTTLED,
        },
    )
    def get(self, request: Request, preview_id: str) -> Response:
        try:
            preview_uuid = uuid.UUID(preview_id)
        except ValueError as not_an_id:
            raise Http404 from not_an_id
        preview = Preview.objects.filter(pk=preview_uuid, agent_session=request.auth).first()
        if preview is None:
            raise Http404
        if settings.CELERY_TASK_ALWAYS_EAGER:
            audit_seal()  # the embedded setup runs no sealer process: seal what is committed now
        return Response(preview_receipt(preview))


class AgentSessionCreateSerializer(StrictSerializer):
    tools = serializers.ListField(child=StrictCharField(max_length=64), required=False, allow_empty=False)
    ttl_seconds = StrictIntegerField(min_value=60, max_value=30 * 24 * 3600, required=False)
    label = StrictCharField(max_length=200, required=False, allow_blank=True)


class AgentSessionCreateView(APIView):
    """The support client mints a token for the person logged in (session cookie and CSRF)."""

    authentication_classes = [SessionAuthentication]

    @extend_schema(
        operation_id="create_agent_session",
        request=AgentSessionCreateSerializer,
        responses={
            201: inline_serializer("AgentSessionCreated", fields={
                "token": serializers.CharField(help_text="Shown once; only its hash is stored."),
                "tools": serializers.ListField(child=serializers.CharField()),
                "expires_at": serializers.DateTimeField(),
            }),
            400: error_response("A malformed request."),
            403: error_response("Not logged in, no CSRF token, or a tool this person may not use."),
            415: error_response("The body is not application/json."),
        },
    )
    def post(self, request: Request) -> Response:
        data = AgentSessionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tools = data.validated_data.get("tools") or [
            name for name, action in registry.actions.items() if action.may_use(request.user)
        ]
        try:
            session, token = agent_session_create(
                user=request.user, tools=tools,
                ttl_seconds=data.validated_data.get("ttl_seconds"),
                label=data.validated_data.get("label", ""),
            )
        except ApplicationError as error:
            return Response(error_body(**error.as_dict()), status=status.HTTP_403_FORBIDDEN)
        return Response(
            {"token": token, "tools": session.tools,
             "expires_at": session.expires_at.isoformat().replace("+00:00", "Z")},
            status=status.HTTP_201_CREATED,
        )
