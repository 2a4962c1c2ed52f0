from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework import serializers

from approvals.plugin import (
    MAX_SAFE_MINOR,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictSerializer,
    SubjectIdField,
    is_known_currency,
)

from .models import Invoice, InvoiceStatus
from .permissions import APPROVE_SENDS, may_approve_sends


class InvoiceLineImportSerializer(StrictSerializer):
    description = StrictCharField(max_length=500)
    quantity = StrictIntegerField(min_value=1, max_value=10**9)
    unit_minor = StrictIntegerField(min_value=0, max_value=MAX_SAFE_MINOR)


class InvoiceImportSerializer(StrictSerializer):
    number = SubjectIdField()
    customer = StrictCharField(max_length=150)
    currency = StrictCharField(min_length=3, max_length=3)
    status = StrictChoiceField(choices=InvoiceStatus.choices)
    contacts = serializers.ListField(child=serializers.EmailField(), required=False, default=list)
    lines = InvoiceLineImportSerializer(many=True)

    def validate_currency(self, value: str) -> str:
        if not is_known_currency(value):
            raise serializers.ValidationError(f"{value!r} is not an ISO 4217 currency code.")
        return value

    def validate_customer(self, value: str) -> str:
        if (
            value not in self.context.get("usernames", set())
            and not get_user_model().objects.filter(username=value).exists()
        ):
            raise serializers.ValidationError(f"No customer {value!r} in the file or the database.")
        return value

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        total = sum(line["quantity"] * line["unit_minor"] for line in data["lines"])
        if total > MAX_SAFE_MINOR:
            raise serializers.ValidationError({"lines": "The invoice total is too large."})
        return data


class StandingApprovalImportSerializer(StrictSerializer):
    invoice = StrictCharField(max_length=64)
    recipient = serializers.EmailField()
    approved_by = StrictCharField(max_length=150)

    def validate_invoice(self, value: str) -> str:
        in_file = {
            item.get("number")
            for item in self.context.get("document", {}).get("invoices", [])
            if isinstance(item, dict)
        }
        if value not in in_file and not Invoice.objects.filter(number=value).exists():
            raise serializers.ValidationError(f"No invoice {value!r} in the file or the database.")
        return value

    def validate_approved_by(self, value: str) -> str:
        """Only an active member of staff who may approve sends may give one in advance. For a staff
        member in the file, the groups the file gives them count (the import sets them)."""
        user = get_user_model().objects.filter(username=value).first()
        in_file = self.context.get("staff_groups", {}).get(value)
        if in_file is None and (user is None or not user.is_staff):
            raise serializers.ValidationError(f"No staff member {value!r} in the file or the database.")
        if user is not None and not user.is_active:
            raise serializers.ValidationError(f"{value!r} is not an active user and may not approve sends.")
        if in_file is not None:
            approver_groups = set(
                Group.objects.filter(
                    permissions__content_type__app_label=APPROVE_SENDS.split(".")[0],
                    permissions__codename=APPROVE_SENDS.split(".")[1],
                ).values_list("name", flat=True)
            )
            allowed = bool(approver_groups & set(in_file)) or bool(user is not None and user.is_superuser)
        else:
            allowed = may_approve_sends(user)
        if not allowed:
            raise serializers.ValidationError(
                f"{value!r} may not approve invoice sends (not in a group with that permission, "
                "such as Invoice approvers)."
            )
        return value


class SendInvoiceArguments(StrictSerializer):
    """What the agent may send: the invoice and one exact recipient. Nothing else."""

    invoice_id = StrictCharField(max_length=64, help_text="The invoice number, e.g. INV-17.")
    recipient = StrictCharField(
        max_length=254, help_text="Exactly one email address to send the invoice to, e.g. billing@example.test."
    )
