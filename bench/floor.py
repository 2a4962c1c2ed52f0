"""The floor of a proposal: the least work any implementation of POST /api/agent/tool-calls must do.

It authenticates the same bearer token with the same authentication class, parses the envelope and
the arguments with the same serializers and the same strict JSON parser, and writes one row. No
policy, no preview, no audit, no idempotency, no throttle, no DRF request/response machinery: what the
real endpoint does beyond this is what the ratio in docs/benchmarks.md measures.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from rest_framework.exceptions import AuthenticationFailed

from approvals.agents.api.authentication import AgentTokenAuthentication
from approvals.agents.api.parsers import StrictJSONError, strict_json_loads
from approvals.agents.api.serializers import ToolCallSerializer
from approvals.core.registry import registry

from .models import FloorCall

AUTHENTICATION = AgentTokenAuthentication()


def _answer(status: int, body: dict) -> JsonResponse:
    return JsonResponse(body, status=status, json_dumps_params={"separators": (",", ":")})


def _error(status: int, code: str) -> JsonResponse:
    return _answer(status, {"ok": False, "executed": False, "error": {"code": code}})


@csrf_exempt
@require_POST
def floor_tool_call(request: HttpRequest) -> JsonResponse:
    try:
        authenticated = AUTHENTICATION.authenticate(request)
    except AuthenticationFailed:
        authenticated = None
    if authenticated is None:
        return _error(401, "not_authenticated")
    _user, session = authenticated
    try:
        data = strict_json_loads(request.body.decode("utf-8"))
    except (StrictJSONError, UnicodeDecodeError):
        return _error(400, "malformed_request")
    envelope = ToolCallSerializer(data=data)
    if not envelope.is_valid():
        return _error(400, "invalid_request")
    name = envelope.validated_data["name"]
    action = registry.action(name)
    if action is None or name not in session.tools:
        return _error(404 if action is None else 403, "tool")
    arguments = envelope.validated_data["arguments"]
    if isinstance(arguments, str):
        try:
            arguments = strict_json_loads(arguments)
        except StrictJSONError:
            return _error(400, "invalid_arguments")
    parsed = action.arguments_serializer(data=arguments)
    if not isinstance(arguments, dict) or not parsed.is_valid():
        return _error(400, "invalid_arguments")
    row = FloorCall.objects.create(agent_session=session, tool_name=name, arguments=dict(parsed.validated_data))
    return _answer(201, {"ok": True, "executed": False, "status": "recorded", "id": row.pk})
