"""OpenAPI description of the agent API (drf-spectacular): extensions registered on import, response shapes.

The serializers below describe answers; the views build them as plain dicts. They exist so
that the schema at /api/schema/ says exactly what a client receives (schemathesis checks it).
"""

from __future__ import annotations

import copy

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers

from ..arguments import MAX_SAFE_MINOR
from ..models import ApprovalRole, ExecutionOutcome, PreviewStatus
from ..registry import registry


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "approvals.api.authentication.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema):  # type: ignore[no-untyped-def]
        return {"type": "http", "scheme": "bearer", "description": "An agent session token (agt_…)."}


class StrictSerializerScheme(OpenApiSerializerExtension):
    """A StrictSerializer answers an unknown field with a 400: say so (`additionalProperties: false`)."""

    target_class = "approvals.arguments.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):  # type: ignore[no-untyped-def]
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        return schema


# Small typed fields ------------------------------------------------------------------------------


@extend_schema_field({"type": "boolean", "enum": [True]}, component_name="AlwaysTrue")
class TrueField(serializers.BooleanField):
    pass


@extend_schema_field({"type": "boolean", "enum": [False]}, component_name="AlwaysFalse")
class FalseField(serializers.BooleanField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": {}})
class ObjectField(serializers.JSONField):
    pass


ARGUMENTS = {"oneOf": [{"type": "object", "additionalProperties": {}}, {"type": "string"}]}


# Errors -----------------------------------------------------------------------------------------

ERROR = inline_serializer(
    "Error",
    fields={
        "code": serializers.CharField(help_text="Stable machine-readable code, e.g. amount_exceeds_remaining."),
        "message": serializers.CharField(help_text="For people and models; states the rule and the numbers."),
        "fields": serializers.JSONField(
            required=False, help_text="Per-field problems of a malformed envelope or arguments."
        ),
        "retry_after_seconds": serializers.IntegerField(
            required=False, min_value=1, help_text="Throttled: seconds until the next call is accepted."
        ),
    },
)
ERROR_ENVELOPE = inline_serializer(
    "ErrorEnvelope",
    fields={
        "ok": FalseField(),
        "executed": FalseField(),
        "error": ERROR,
        "call_id": serializers.CharField(required=False, help_text="Echo of the call's call_id."),
    },
)


def error_response(description: str) -> OpenApiResponse:
    return OpenApiResponse(ERROR_ENVELOPE, description=description)


UNAUTHORIZED = error_response("No, malformed, unknown, expired or revoked agent token (with WWW-Authenticate).")
THROTTLED = error_response("Too many calls from this agent session (with Retry-After).")
AUTH_HEADERS = [
    OpenApiParameter(
        "WWW-Authenticate",
        {"type": "string", "enum": ['Bearer realm="agent"']},
        OpenApiParameter.HEADER,
        required=True,
        response=[401],
        description="The agent token scheme.",
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


# Previews ---------------------------------------------------------------------------------------


class PreviewFailureSerializer(serializers.Serializer):
    code = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def OUTCOME_FIELD() -> serializers.ChoiceField:  # noqa: N802 - a field factory, read like a field class
    return serializers.ChoiceField(
        choices=ExecutionOutcome.choices,
        allow_null=True,
        help_text="What is known about the execution's effect; null before the preview was approved. "
        "`refused_before_effect` and `failed_after_check` prove nothing was done; `effect_unknown` does not.",
    )


def _preview_serializer(name: str, arguments: type[serializers.Serializer]) -> serializers.Serializer:
    """An action's preview: the engine's fields, the action's arguments echoed, amount and currency from
    trusted data."""
    echoed = {
        field_name: copy.deepcopy(field)
        for field_name, field in arguments._declared_fields.items()
        if field_name not in {"amount_minor", "currency"}
    }
    return inline_serializer(
        f"{_camel(name)}Preview",
        fields={
            "id": serializers.UUIDField(),
            "action": serializers.ChoiceField(choices=[name]),
            **echoed,
            "amount_minor": serializers.IntegerField(
                min_value=0, max_value=MAX_SAFE_MINOR, help_text="In the minor unit of `currency`."
            ),
            "currency": serializers.CharField(
                min_length=3, max_length=3, help_text="ISO 4217, always the subject's own."
            ),
            "status": serializers.ChoiceField(choices=PreviewStatus.choices),
            "expires_at": serializers.DateTimeField(),
            "required_approvals": serializers.ListField(child=serializers.ChoiceField(choices=ApprovalRole.choices)),
            "confirm_url": serializers.URLField(
                required=False, help_text="Where the customer confirms (when a customer approval is required)."
            ),
            "executed": serializers.BooleanField(help_text="True only once the worker executed it."),
            "outcome": OUTCOME_FIELD(),
            "result": ObjectField(required=False, help_text="What the executor reported (executed only)."),
            "failure": PreviewFailureSerializer(required=False, help_text="Why it failed, expired or was superseded."),
        },
    )


def _preview_serializers() -> dict[str, serializers.Serializer]:
    return {
        name: _preview_serializer(name, action.arguments_serializer)
        for name, action in sorted(registry.actions.items())
    }


@extend_schema_field(
    PolymorphicProxySerializer(
        component_name="Preview", serializers=_preview_serializers, resource_type_field_name="action"
    )
)
class PreviewField(serializers.JSONField):
    pass


PREVIEW_ENVELOPE = inline_serializer(
    "PreviewEnvelope",
    fields={
        "ok": TrueField(),
        "executed": serializers.BooleanField(help_text="True only once the worker executed the preview."),
        "status": serializers.ChoiceField(choices=PreviewStatus.choices),
        "outcome": OUTCOME_FIELD(),
        "preview": PreviewField(),
        "message": serializers.CharField(help_text="The status in words an agent can relay truthfully."),
        "call_id": serializers.CharField(required=False, help_text="Echo of the call's call_id."),
    },
)


PREVIEW_PAGE = inline_serializer(
    "PreviewPage",
    fields={
        "results": type(PREVIEW_ENVELOPE)(many=True, help_text="Preview envelopes, newest first."),
        "page": serializers.IntegerField(min_value=1),
        "next": serializers.URLField(allow_null=True),
        "previous": serializers.URLField(allow_null=True),
    },
)


# Tools --------------------------------------------------------------------------------------------

TOOL_LIST = inline_serializer(
    "ToolList",
    fields={
        "tools": inline_serializer(
            "Tool",
            fields={
                "name": serializers.CharField(),
                "description": serializers.CharField(),
                "input_schema": ObjectField(help_text="JSON Schema of the tool's arguments."),
            },
            many=True,
        ),
    },
)
OPENAI_TOOL = inline_serializer(
    "OpenAITool",
    fields={
        "type": serializers.ChoiceField(choices=["function"]),
        "function": inline_serializer(
            "OpenAIFunction",
            fields={
                "name": serializers.CharField(),
                "description": serializers.CharField(),
                "parameters": ObjectField(help_text="JSON Schema of the tool's arguments."),
                "strict": TrueField(),
            },
        ),
    },
)
OPENAI_RESPONSES_TOOL = inline_serializer(
    "OpenAIResponsesTool",
    fields={
        "type": serializers.ChoiceField(choices=["function"]),
        "name": serializers.CharField(),
        "description": serializers.CharField(),
        "parameters": ObjectField(help_text="JSON Schema of the tool's arguments (strict mode's subset)."),
        "strict": TrueField(),
    },
)
ANTHROPIC_TOOL = inline_serializer(
    "AnthropicTool",
    fields={
        "name": serializers.CharField(),
        "description": serializers.CharField(),
        "input_schema": ObjectField(help_text="JSON Schema of the tool's arguments."),
    },
)
MCP_TOOL_LIST = inline_serializer(
    "MCPToolList",
    fields={
        "tools": inline_serializer(
            "MCPTool",
            fields={
                "name": serializers.CharField(),
                "description": serializers.CharField(),
                "inputSchema": ObjectField(help_text="JSON Schema of the tool's arguments."),
                "annotations": ObjectField(help_text="destructiveHint, idempotentHint, readOnlyHint, openWorldHint."),
            },
            many=True,
        ),
    },
)
GEMINI_TOOL = inline_serializer(
    "GeminiTool",
    fields={
        "functionDeclarations": inline_serializer(
            "GeminiFunctionDeclaration",
            fields={
                "name": serializers.CharField(),
                "description": serializers.CharField(),
                "parameters": ObjectField(help_text="The arguments as Gemini's OpenAPI Schema subset."),
            },
            many=True,
        ),
    },
)
TOOL_LISTING = PolymorphicProxySerializer(
    component_name="ToolListing",
    serializers=[
        TOOL_LIST,
        type(OPENAI_TOOL)(many=True),
        type(OPENAI_RESPONSES_TOOL)(many=True),
        type(ANTHROPIC_TOOL)(many=True),
        MCP_TOOL_LIST,
        type(GEMINI_TOOL)(many=True),
    ],
    resource_type_field_name=None,
    many=False,
)

PREVIEW_ID = OpenApiParameter("preview_id", OpenApiTypes.UUID, OpenApiParameter.PATH)
IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "pattern": "^[!-~]{1,255}$", "minLength": 1, "maxLength": 255},
    OpenApiParameter.HEADER,
    required=False,
    description="Replays the first answer for the same body; 409 for a different body.",
)
