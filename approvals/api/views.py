"""The agent API: thin views that parse (every 400 comes from here) and call services."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
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
from rest_framework.exceptions import ParseError, UnsupportedMediaType, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..arguments import StrictCharField, StrictIntegerField, StrictSerializer
from ..audit_seal import audit_seal, preview_receipt
from ..errors import ApplicationError
from ..models import AuditEvent, Preview, PreviewStatus, RejectedCallKind
from ..presentation import preview_envelope
from ..registry import registry
from ..rejected_calls import SAMPLE_CHARACTERS, rejected_call_audit_due, rejected_call_count
from ..services import agent_session_create, preview_refresh, proposal_audit_rejected
from ..webhooks import agent_session_webhook_set, webhook_url_check
from .authentication import AgentTokenAuthentication
from .calls import audit_rejected_call, raw_arguments_text, storable, tool_call
from .errors import error_body, error_code
from .formats import FORMATS, tool_listing
from .previews import preview_wait_for_change, session_previews
from .schema import (
    ARGUMENTS,
    AUTH_HEADERS,
    IDEMPOTENCY_KEY_PARAMETER,
    PREVIEW_ENVELOPE,
    PREVIEW_ID,
    PREVIEW_PAGE,
    THROTTLED,
    TOOL_LISTING,
    UNAUTHORIZED,
    error_response,
)
from .throttling import AgentSessionThrottle, AgentUserThrottle

PREVIEW_WAIT_LIMIT = 60  # what a client may ask for; the server caps the wait lower (previews.py)
PREVIEW_PAGE_SIZE = 20
PREVIEW_PAGE_SIZE_MAX = 100


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
                    agent_session=session,
                    event=AuditEvent.CALL_THROTTLED,
                    tool_name="",
                    raw_arguments=storable(body[:SAMPLE_CHARACTERS]),
                    error={"code": "throttled", "calls_this_minute": count, "path": request.path[:200]},
                )
        super().throttled(request, wait)


@extend_schema_field(ARGUMENTS)
class ArgumentsField(serializers.JSONField):
    """A JSON object, or a string holding one (as models emit tool calls)."""


class ToolCallSerializer(StrictSerializer):
    name = StrictCharField(max_length=64, help_text="The tool's name, from GET /api/agent/tools.")
    arguments = ArgumentsField(help_text="The tool's arguments: a JSON object or a string holding one.")
    call_id = StrictCharField(max_length=200, required=False, help_text="Your id for this call.")


class ToolListView(AgentAPIView):
    @extend_schema(
        operation_id="list_tools",
        parameters=[
            OpenApiParameter(
                "format",
                str,
                enum=list(FORMATS),
                required=False,
                description="The shape of a model API's tool list (docs/agents.md); without it, "
                "the contract's own shape.",
            ),
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
        if output is not None and output not in FORMATS:
            return Response(
                error_body("invalid_request", f"Unknown format {output[:40]!r}; the formats are {', '.join(FORMATS)}."),
                status=status.HTTP_400_BAD_REQUEST,
            )
        return Response(tool_listing(request.auth, output))


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
            audit_rejected_call(
                session=session,
                event=AuditEvent.PROPOSAL_INVALID,
                tool_name="",
                raw_arguments=storable(getattr(request, "raw_body_text", "")),
                error=storable({"code": error_code(error), "message": str(error.detail)}),
            )
            raise
        tool_name = data.get("name") if isinstance(data, dict) else None
        tool_name = tool_name if isinstance(tool_name, str) else ""
        envelope = ToolCallSerializer(data=data)
        if not envelope.is_valid():
            body = storable(
                error_body("invalid_request", "The tool call envelope is malformed.", fields=envelope.errors)
            )
            audit_rejected_call(
                session=session,
                event=AuditEvent.PROPOSAL_INVALID,
                tool_name=storable(tool_name),
                raw_arguments=storable(raw_arguments_text(data.get("arguments") if isinstance(data, dict) else None)),
                error=body["error"],
            )
            return Response(body, status=status.HTTP_400_BAD_REQUEST)
        answer = tool_call(
            session=session,
            tool_name=tool_name,
            arguments=envelope.validated_data["arguments"],
            call_id=envelope.validated_data.get("call_id"),
            idempotency_key=request.headers.get("Idempotency-Key"),
            base_url=self.base_url(),
        )
        return Response(answer.body, status=answer.http_status)


class PreviewWaitSerializer(StrictSerializer):
    wait = StrictIntegerField(min_value=0, max_value=PREVIEW_WAIT_LIMIT, required=False)


def _query(request: Request, serializer: type[StrictSerializer]) -> dict[str, Any]:
    """The query string parsed strictly: integers as integers, unknown parameters refused."""
    data: dict[str, Any] = {}
    for key, value in request.query_params.items():
        field = serializer().fields.get(key)
        if isinstance(field, StrictIntegerField):
            if not value.isascii() or not value.isdigit() or len(value) > 9:
                raise ValidationError({key: ["A whole number is required."]})
            data[key] = int(value)
        else:
            data[key] = value
    parsed = serializer(data=data)
    parsed.is_valid(raise_exception=True)
    return dict(parsed.validated_data)


class PreviewStatusView(AgentAPIView):
    @extend_schema(
        operation_id="get_preview",
        parameters=[
            PREVIEW_ID,
            OpenApiParameter(
                "wait",
                {"type": "integer", "minimum": 0, "maximum": PREVIEW_WAIT_LIMIT},
                required=False,
                description="Long-poll: answer as soon as the status or outcome changes, or after this many "
                "seconds (capped by the server, AGENT_PREVIEW_WAIT_MAX_SECONDS; ask again).",
            ),
            *AUTH_HEADERS,
        ],
        responses={
            200: OpenApiResponse(PREVIEW_ENVELOPE, description="The preview with its real status."),
            400: error_response("A malformed `wait`."),
            401: UNAUTHORIZED,
            404: error_response("No such preview of this person (the same answer for someone else's)."),
            429: THROTTLED,
        },
    )
    def get(self, request: Request, preview_id: str) -> Response:
        query = _query(request, PreviewWaitSerializer)
        try:
            preview_uuid = uuid.UUID(preview_id)
        except ValueError as not_an_id:
            raise Http404 from not_an_id
        preview = Preview.objects.filter(pk=preview_uuid, actor=request.user).first()
        if preview is None:
            raise Http404
        preview = preview_refresh(preview=preview)
        waited = None
        if query.get("wait"):
            preview, waited = preview_wait_for_change(preview, query["wait"])
        response = Response(preview_envelope(preview, base_url=self.base_url()))
        if waited is not None:
            response["Preview-Waited-Seconds"] = f"{waited:.1f}"
        return response


class PreviewListSerializer(StrictSerializer):
    status = StrictCharField(
        required=False, max_length=400, help_text="Comma-separated statuses to keep, e.g. awaiting_customer,approved."
    )
    page = StrictIntegerField(min_value=1, max_value=100000, required=False)
    page_size = StrictIntegerField(min_value=1, max_value=PREVIEW_PAGE_SIZE_MAX, required=False)

    def validate_status(self, value: str) -> list[str]:
        statuses = [part.strip() for part in value.split(",") if part.strip()]
        unknown = sorted(set(statuses) - set(PreviewStatus.values))
        if unknown or not statuses:
            raise ValidationError(
                f"Unknown status {', '.join(unknown) or value!r}; the statuses are {', '.join(PreviewStatus.values)}."
            )
        return statuses


class PreviewListView(AgentAPIView):
    @extend_schema(
        operation_id="list_previews",
        parameters=[
            OpenApiParameter(
                "status",
                str,
                required=False,
                description="Comma-separated statuses to keep, e.g. `awaiting_customer,approved`.",
            ),
            OpenApiParameter("page", {"type": "integer", "minimum": 1, "maximum": 100000}, required=False),
            OpenApiParameter(
                "page_size",
                {"type": "integer", "minimum": 1, "maximum": PREVIEW_PAGE_SIZE_MAX},
                required=False,
                description=f"Default {PREVIEW_PAGE_SIZE}.",
            ),
            *AUTH_HEADERS,
        ],
        responses={
            200: PREVIEW_PAGE,
            400: error_response("An unknown status or a malformed page."),
            401: UNAUTHORIZED,
            429: THROTTLED,
        },
    )
    def get(self, request: Request) -> Response:
        query = _query(request, PreviewListSerializer)
        page, size = query.get("page", 1), query.get("page_size", PREVIEW_PAGE_SIZE)
        previews = session_previews(request.auth, query.get("status"))
        rows = list(previews[(page - 1) * size : page * size + 1])
        base_url = self.base_url()

        def link(number: int) -> str:
            params = request.query_params.copy()
            params["page"] = str(number)
            return request.build_absolute_uri(f"{request.path}?{params.urlencode()}")

        return Response(
            {
                "results": [preview_envelope(preview, base_url=base_url) for preview in rows[:size]],
                "page": page,
                "next": link(page + 1) if len(rows) > size else None,
                "previous": link(page - 1) if page > 1 else None,
            }
        )


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
    webhook_url = StrictCharField(
        max_length=2000,
        required=False,
        help_text="http(s) URL that receives every preview transition of this session (Standard Webhooks).",
    )


class AgentSessionCreateView(APIView):
    """The support client mints a token for the person logged in (session cookie and CSRF)."""

    authentication_classes = [SessionAuthentication]

    @extend_schema(
        operation_id="create_agent_session",
        request=AgentSessionCreateSerializer,
        responses={
            201: inline_serializer(
                "AgentSessionCreated",
                fields={
                    "token": serializers.CharField(help_text="Shown once; only its hash is stored."),
                    "tools": serializers.ListField(child=serializers.CharField()),
                    "expires_at": serializers.DateTimeField(),
                    "webhook_secret": serializers.CharField(
                        required=False, help_text="whsec_…: verifies the webhook's messages; shown once."
                    ),
                },
            ),
            400: error_response("A malformed request, or a webhook URL that is not http(s)."),
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
        webhook_url = data.validated_data.get("webhook_url")
        if webhook_url is not None:
            try:
                webhook_url_check(webhook_url)
            except ApplicationError as error:
                return Response(error_body(**error.as_dict()), status=status.HTTP_400_BAD_REQUEST)
        try:
            with transaction.atomic():
                session, token = agent_session_create(
                    user=request.user,
                    tools=tools,
                    ttl_seconds=data.validated_data.get("ttl_seconds"),
                    label=data.validated_data.get("label", ""),
                )
                secret = agent_session_webhook_set(session, webhook_url) if webhook_url is not None else None
        except ApplicationError as error:
            return Response(error_body(**error.as_dict()), status=status.HTTP_403_FORBIDDEN)
        body = {
            "token": token,
            "tools": session.tools,
            "expires_at": session.expires_at.isoformat().replace("+00:00", "Z"),
        }
        if secret is not None:
            body["webhook_secret"] = secret
        return Response(body, status=status.HTTP_201_CREATED)
