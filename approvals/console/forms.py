"""Console forms: every input a console view accepts is validated here."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.core.validators import RegexValidator
from django.utils import timezone

from ..models import PreviewStatus
from .selectors import ALL_STATES, DEFAULT_QUEUE_STATE, QueueFilters

AGE_CHOICES = [
    ("", "Any age"),
    ("5m", "Older than 5 minutes"),
    ("1h", "Older than 1 hour"),
    ("1d", "Older than 1 day"),
    ("7d", "Older than 7 days"),
]


class QueueFilterForm(forms.Form):
    q = forms.CharField(label="Search order or customer", max_length=100, required=False)
    action = forms.ChoiceField(label="Action", required=False)
    state = forms.ChoiceField(
        label="State",
        required=False,
        choices=[(s.value, s.label) for s in PreviewStatus] + [(ALL_STATES, "Any state")],
    )
    currency = forms.CharField(
        label="Currency",
        required=False,
        max_length=3,
        validators=[RegexValidator(r"^[A-Za-z]{3}$", "Use a three-letter currency code such as EUR.")],
    )
    age = forms.ChoiceField(label="Age", required=False, choices=AGE_CHOICES)

    def __init__(self, *args: Any, actions: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["action"].choices = [("", "Any action")] + [(name, name.replace("_", " ")) for name in actions]

    def filters(self) -> QueueFilters:
        """The filters to apply. Django leaves invalid fields out of cleaned_data: they fall back to
        their defaults (and the form shows the error) rather than failing the page."""
        self.is_valid()
        data = self.cleaned_data
        return QueueFilters(
            action=data.get("action") or "",
            state=data.get("state") or DEFAULT_QUEUE_STATE,
            currency=(data.get("currency") or "").upper(),
            age=data.get("age") or "",
            query=(data.get("q") or "").strip(),
        )


class ApproveForm(forms.Form):
    digest = forms.CharField(max_length=64, min_length=64)


class RejectForm(forms.Form):
    digest = forms.CharField(max_length=64, min_length=64)
    note = forms.CharField(
        label="Why are you rejecting it?",
        max_length=1000,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 3}),
        error_messages={"required": "Write a note: the customer and the audit log see why it was rejected."},
    )


class DateTimeLocalInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(format="%Y-%m-%dT%H:%M", **kwargs)


class AuditExportForm(forms.Form):
    start = forms.DateTimeField(label="From", widget=DateTimeLocalInput())
    end = forms.DateTimeField(label="Until (not included)", widget=DateTimeLocalInput())
    format = forms.ChoiceField(
        label="Format", choices=[("csv", "CSV (spreadsheets)"), ("jsonl", "JSON lines (exact values)")]
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if start and end and end <= start:
            raise forms.ValidationError("The end must be after the start.")
        return data

    @classmethod
    def initial_range(cls) -> dict[str, Any]:
        now = timezone.localtime().replace(second=0, microsecond=0)
        return {"start": now - timedelta(days=1), "end": now + timedelta(minutes=1), "format": "csv"}
