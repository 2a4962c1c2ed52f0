"""The agent API: thin views that parse (every 400 comes from here) and call services."""

from __future__ import annotations

import uuid
from typing import Any, NoReturn, cast

from django.conf import settings
from django.db import transaction
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ParseError, UnsupportedMediaType, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.agents.api.authentication import (
    BEARER_HEADER_EXAMPLE,
    AgentTokenAuthentication,
    request_agent_session,
    request_person,
)
from approvals.agents.api.calls import (
    CallAnswer,
    body_unparsable,
    envelope_invalid,
    preview_not_found_body,
    storable,
    tool_call,
    withdraw_call,
)
from approvals.agents.api.errors import error_body, error_code
from approvals.agents.api.formats import FORMATS, tool_listing
from approvals.agents.api.previews import preview_wait, session_previews
from approvals.agents.api.serializers import (
    PREVIEW_PAGE_SIZE,
    TOOL_LISTING,
    AgentSessionCreatedSerializer,
    AgentSessionCreateSerializer,
    PreviewEnvelopeSerializer,
    PreviewListSerializer,
    PreviewPageSerializer,
    PreviewWaitSerializer,
    ToolCallSerializer,
    answer_data,
    error_response,
    preview_page_data,
)
from approvals.agents.api.throttling import AgentThrottle
from approvals.agents.rejected_calls import SAMPLE_CHARACTERS, rejected_call_audit_due, rejected_call_count
from approvals.agents.webhooks import agent_session_webhook_set, webhook_url_check
from approvals.audit.seal import audit_seal, preview_receipt
from approvals.core.arguments import StrictIntegerField, StrictSerializer
from approvals.core.errors import ApplicationError, ErrorCode
from approvals.core.presentation import preview_envelope
from approvals.core.registry import registry
from approvals.core.services import agent_session_create, preview_refresh, proposal_audit_rejected
from approvals.core.strict_json import member_text
from approvals.models import AgentSession, AuditEvent, Preview, RejectedCallKind

# What the schema says beyond the serializers: headers, path parameters, and each answer's meaning.


UNAUTHORIZED = error_response("No, malformed, unknown, expired or revoked agent token (with WWW-Authenticate).")
THROTTLED = error_response("Too many calls from this agent session (with Retry-After).")
AUTH_HEADERS = [
    OpenApiParameter(
        "WWW-Authenticate",
        {
            "type": "string",
            "pattern": '^Bearer realm="agent", resource_metadata="[^"]+/\\.well-known/oauth-protected-resource"$',
        },
        OpenApiParameter.HEADER,
        required=True,
        response=[401],
        description="The agent token scheme, with the protected resource metadata (RFC 9728) for OAuth clients.",
    ),
    OpenApiParameter(
        "Retry-After",
        {"type": "integer", "minimum": 1},
        OpenApiParameter.HEADER,
        required=True,
        response=[429],
        description="Seconds until the next call is accepted.",
    ),
]
PREVIEW_ID = OpenApiParameter("preview_id", OpenApiTypes.UUID, OpenApiParameter.PATH)
IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "pattern": "^[!-~]{1,255}$", "minLength": 1, "maxLength": 255},
    OpenApiParameter.HEADER,
    required=False,
    description="Replays the first answer for the same body; 409 for a different body.",
)


def answer_response(answer: CallAnswer) -> Response:
    """A tool call's answer, rendered by its serializer with its HTTP status."""
    return Response(answer_data(answer.body), status=answer.http_status)


class AgentAPIView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    throttle_classes = [AgentThrottle]

    def base_url(self) -> str:
        return self.request.build_absolute_uri("/")

    def permission_denied(self, request: Request, message: str | None = None, code: str | None = None) -> NoReturn:
        if request.authenticators and not request.successful_authenticator:
            raise exceptions.NotAuthenticated(f"No agent token: send the header {BEARER_HEADER_EXAMPLE}.")
        super().permission_denied(request, message, code)

    def throttled(self, request: Request, wait: float) -> NoReturn:
        """Count the throttled call (and audit the first ones of the minute) before answering 429."""
        session = cast("AgentSession | None", request.auth)  # the agent session AgentTokenAuthentication set
        if session is not None:
            if request.method == "POST":
                try:
                    body = request._request.body.decode("utf-8", "replace")
                except Exception:  # noqa: BLE001 - an oversized or unreadable body: count the call anyway
                    body = ""
            else:
                body = request.get_full_path()
            count = rejected_call_count(
                agent_session=session, kind=RejectedCallKind.THROTTLED, body=body, code=ErrorCode.THROTTLED
            )
            if rejected_call_audit_due(count):
                proposal_audit_rejected(
                    agent_session=session,
                    event=AuditEvent.CALL_THROTTLED,
                    tool_name="",
                    raw_arguments=storable(body[:SAMPLE_CHARACTERS]),
                    error={"code": ErrorCode.THROTTLED, "calls_this_minute": count, "path": request.path[:200]},
                )
        super().throttled(request, wait)


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
            message = f"Unknown format {output[:40]!r}; the formats are {', '.join(FORMATS)}."
            return Response(error_body(ErrorCode.INVALID_REQUEST, message), status=status.HTTP_400_BAD_REQUEST)
        return Response(tool_listing(request_agent_session(request), output))


class ToolCallView(AgentAPIView):
    # The envelope is parsed here (its 400s), the call proposed by approvals.agents.api.calls (shared with the MCP
    # server), and the answer rendered by its serializer.

    @extend_schema(
        operation_id="propose_tool_call",
        request=ToolCallSerializer,
        parameters=[IDEMPOTENCY_KEY_PARAMETER, *AUTH_HEADERS],
        responses={
            200: OpenApiResponse(
                PreviewEnvelopeSerializer, description="A replay, or the same pending proposal again."
            ),
            201: OpenApiResponse(PreviewEnvelopeSerializer, description="A new preview; nothing has happened yet."),
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
        data = self.parsed_body(request)
        envelope = ToolCallSerializer(data=data)
        if not envelope.is_valid():
            return answer_response(
                envelope_invalid(session=request_agent_session(request), data=data, errors=envelope.errors)
            )
        arguments = envelope.validated_data["arguments"]
        answer = tool_call(
            session=request_agent_session(request),
            tool_name=envelope.validated_data["name"],
            arguments=arguments,
            call_id=envelope.validated_data.get("call_id"),
            idempotency_key=request.headers.get("Idempotency-Key"),
            base_url=self.base_url(),
            # An object's text as it stands in the body (a string is kept as received anyway).
            raw_arguments=None
            if isinstance(arguments, str)
            else member_text(getattr(request, "raw_body_text", ""), "arguments"),
        )
        return answer_response(answer)

    def parsed_body(self, request: Request) -> Any:
        """The parsed JSON body; a body that is not JSON is audited before the 400 or 415."""
        try:
            return request.data
        except (ParseError, UnsupportedMediaType) as error:
            raw_body = getattr(request, "raw_body_text", "")
            body_unparsable(
                session=request_agent_session(request),
                raw_body=raw_body,
                code=error_code(error),
                message=str(error.detail),
            )
            raise


def _query(request: Request, serializer: type[StrictSerializer]) -> dict[str, Any]:
    """The query string parsed strictly: integers as integers, unknown parameters refused."""
    data: dict[str, Any] = {}
    for key, value in request.query_params.items():
        field = serializer().fields.get(key)
        if isinstance(field, StrictIntegerField):
            assert isinstance(value, str), "QueryDict.items() gives each parameter's last value, a string"
            if not value.isascii() or not value.isdigit() or len(value) > 9:
                raise ValidationError({key: ["A whole number is required."]})
            data[key] = int(value)
        else:
            data[key] = value
    parsed = serializer(data=data)
    parsed.is_valid(raise_exception=True)
    return dict(parsed.validated_data)


def _preview_uuid(preview_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(preview_id)
    except ValueError as not_an_id:
        raise Http404 from not_an_id


class PreviewStatusView(AgentAPIView):
    @extend_schema(
        operation_id="get_preview",
        parameters=[PREVIEW_ID, PreviewWaitSerializer, *AUTH_HEADERS],
        responses={
            200: OpenApiResponse(PreviewEnvelopeSerializer, description="The preview with its real status."),
            400: error_response("A malformed `wait`."),
            401: UNAUTHORIZED,
            404: error_response("No such preview of this person (the same answer for someone else's)."),
            429: THROTTLED,
        },
    )
    def get(self, request: Request, preview_id: str) -> Response:
        query = _query(request, PreviewWaitSerializer)
        preview = Preview.objects.filter(pk=_preview_uuid(preview_id), actor=request_person(request)).first()
        if preview is None:
            raise Http404
        preview = preview_refresh(preview=preview)
        waited, declined = None, None
        if query.get("wait"):
            preview, waited, declined = preview_wait(preview, query["wait"], request_agent_session(request).pk)
        response = Response(answer_data(preview_envelope(preview, base_url=self.base_url())))
        if waited is not None:
            response["Preview-Waited-Seconds"] = f"{waited:.1f}"
        if declined is not None:
            response["Preview-Wait-Declined"] = declined
        return response


class PreviewWithdrawView(AgentAPIView):
    @extend_schema(
        operation_id="withdraw_preview",
        request=None,
        parameters=[PREVIEW_ID, *AUTH_HEADERS],
        responses={
            200: OpenApiResponse(
                PreviewEnvelopeSerializer,
                description="Withdrawn (status `withdrawn`); nothing was done. A preview withdrawn already is "
                "answered the same way.",
            ),
            401: UNAUTHORIZED,
            404: error_response("No such preview of this agent session (the same answer for another's)."),
            409: error_response(
                "It no longer waits for a decision (approved, executed, declined, expired, …): "
                "`not_awaiting_decision` with its `status`."
            ),
            429: THROTTLED,
        },
    )
    def post(self, request: Request, preview_id: str) -> Response:
        try:
            preview_uuid = uuid.UUID(preview_id)
        except ValueError:  # not an id at all: as for an id of no preview of this session
            return Response(answer_data(preview_not_found_body()), status=status.HTTP_404_NOT_FOUND)
        session = request_agent_session(request)
        return answer_response(withdraw_call(session=session, preview_id=preview_uuid, base_url=self.base_url()))


class PreviewListView(AgentAPIView):
    @extend_schema(
        operation_id="list_previews",
        parameters=[PreviewListSerializer, *AUTH_HEADERS],
        responses={
            200: PreviewPageSerializer,
            400: error_response("An unknown status or a malformed page."),
            401: UNAUTHORIZED,
            429: THROTTLED,
        },
    )
    def get(self, request: Request) -> Response:
        query = _query(request, PreviewListSerializer)
        page, size = query.get("page", 1), query.get("page_size", PREVIEW_PAGE_SIZE)
        previews = session_previews(request_agent_session(request), query.get("status"))
        rows = list(previews[(page - 1) * size : page * size + 1])
        base_url = self.base_url()

        def link(number: int) -> str:
            params = request.query_params.copy()
            params["page"] = str(number)
            return request.build_absolute_uri(f"{request.path}?{params.urlencode()}")

        body = {
            "results": [preview_envelope(preview, base_url=base_url) for preview in rows[:size]],
            "page": page,
            "next": link(page + 1) if len(rows) > size else None,
            "previous": link(page - 1) if page > 1 else None,
        }
        return Response(preview_page_data(body))


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
        preview = Preview.objects.filter(
            pk=_preview_uuid(preview_id), agent_session=request_agent_session(request)
        ).first()
        if preview is None:
            raise Http404
        if settings.CELERY_TASK_ALWAYS_EAGER:
            audit_seal()  # the embedded setup runs no sealer process: seal what is committed now
        return Response(preview_receipt(preview))


class AgentSessionCreateView(APIView):
    """The support client mints a token for the person logged in (session cookie and CSRF)."""

    authentication_classes = [SessionAuthentication]

    @extend_schema(
        operation_id="create_agent_session",
        request=AgentSessionCreateSerializer,
        responses={
            201: AgentSessionCreatedSerializer,
            400: error_response("A malformed request, or a webhook URL that is not http(s)."),
            403: error_response("Not logged in, no CSRF token, or a tool this person may not use."),
            415: error_response("The body is not application/json."),
        },
    )
    def post(self, request: Request) -> Response:
        data = AgentSessionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tools = data.validated_data.get("tools") or [
            name for name, action in registry.actions.items() if action.may_use(request_person(request))
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
                    user=request_person(request),
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
        return Response(AgentSessionCreatedSerializer(body).data, status=status.HTTP_201_CREATED)
