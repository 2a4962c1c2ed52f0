"""The shapes the OpenAPI schema gives the shop data API, built from each served import section's own
item serializer (the import format is the API's format)."""

from __future__ import annotations

import copy

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from approvals.agents.api.serializers import TrueField
from approvals.core.registry import ImportSection

OUTCOMES = ["created", "updated", "unchanged"]


@extend_schema_field(
    {
        "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string"}],
        "description": "The record's version, what If-Match names: an integer for orders and invoices "
        "(raised by every change), an opaque string for customers (a digest of what is stored).",
    }
)
class VersionField(serializers.JSONField):
    pass


def _title(section: ImportSection) -> str:
    return section.key.title().rstrip("s")


def record_request_serializer(section: ImportSection) -> type[serializers.Serializer]:
    """The import's item serializer, its identity field optional: the path names the record."""
    identity = copy.deepcopy(section.item_serializer._declared_fields[section.key_field])
    identity.required = False
    return type(
        f"Shop{_title(section)}RecordSerializer",
        (section.item_serializer,),
        {section.key_field: identity, "__doc__": f"One item of import_shop_data's `{section.key}` section."},
    )


def record_answer_serializer(section: ImportSection) -> type[serializers.Serializer]:
    return type(
        f"Shop{_title(section)}AnswerSerializer",
        (serializers.Serializer,),
        {
            "__doc__": "The record as stored now, in the import format (never a password), and its version.",
            "ok": TrueField(),
            "outcome": serializers.ChoiceField(
                choices=OUTCOMES, required=False, help_text="What the PUT did (absent on a GET)."
            ),
            "record": section.item_serializer(),
            "version": VersionField(),
        },
    )
