"""Console forms: every input a console view accepts is validated here."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, cast

from django import forms
from django.core.validators import RegexValidator
from django.utils import timezone

from approvals.console.review_work import BulkItem
from approvals.console.selectors import ALL_STATES, DEFAULT_QUEUE_STATE, QueueFilters
from approvals.core.registry import CounterField
from approvals.models import AuditEvent, PreviewStatus

AGE_CHOICES = [
    ("", "Any age"),
    ("5m", "Older than 5 minutes"),
    ("1h", "Older than 1 hour"),
    ("1d", "Older than 1 day"),
    ("7d", "Older than 7 days"),
]


class QueueFilterForm(forms.Form):
    q = forms.CharField(
        label="Search order, invoice, customer or recipient",
        max_length=100,
        required=False,
        help_text="An order or invoice number, a customer's name or email, an invoice recipient, or a preview id.",
    )
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
    mine = forms.BooleanField(label="Only mine (claimed by me)", required=False)
    overdue = forms.BooleanField(label="Only overdue", required=False)

    def __init__(self, *args: Any, actions: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        action = cast(forms.ChoiceField, self.fields["action"])
        action.choices = [("", "Any action")] + [(name, name.replace("_", " ")) for name in actions]

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
            mine=bool(data.get("mine")),
            overdue=bool(data.get("overdue")),
        )


# The JSON of the browser's navigator.credentials.get answer (static/js/passkeys.js), when a passkey signed.
PASSKEY_ASSERTION_MAX_CHARS = 16 * 1024


def passkey_assertion_field() -> forms.CharField:
    return forms.CharField(required=False, max_length=PASSKEY_ASSERTION_MAX_CHARS, strip=True)


class ApproveForm(forms.Form):
    digest = forms.CharField(max_length=64, min_length=64)
    passkey_assertion = passkey_assertion_field()


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
        super().clean()
        data = self.cleaned_data
        start, end = data.get("start"), data.get("end")
        if start and end and end <= start:
            raise forms.ValidationError("The end must be after the start.")
        return data

    @classmethod
    def initial_range(cls) -> dict[str, Any]:
        now = timezone.localtime().replace(second=0, microsecond=0)
        return {"start": now - timedelta(days=1), "end": now + timedelta(minutes=1), "format": "csv"}


class EventLogForm(forms.Form):
    """The event log's filters (a GET form): every field optional; `before` is the keyset of a page."""

    action = forms.ChoiceField(label="Action kind", required=False)
    event = forms.ChoiceField(
        label="Event", required=False, choices=[("", "Any event"), *[(e.value, e.value) for e in AuditEvent]]
    )
    preview = forms.UUIDField(label="Preview id", required=False)
    actor = forms.CharField(label="Actor (username)", required=False, max_length=150, strip=True)
    start = forms.DateTimeField(label="From", required=False, widget=DateTimeLocalInput())
    end = forms.DateTimeField(label="Until (not included)", required=False, widget=DateTimeLocalInput())
    before = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput())

    def __init__(self, *args: Any, actions: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["action"]).choices = [("", "Any kind"), *[(a, a) for a in actions]]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        start, end = data.get("start"), data.get("end")
        if start and end and end <= start:
            raise forms.ValidationError("The end must be after the start.")
        return data


class BulkDecisionForm(forms.Form):
    """Bulk approve or reject: each checked preview carries `id:digest:subject version` as the page showed it."""

    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    note = forms.CharField(label="Why are you rejecting them?", max_length=1000, required=False, strip=True)
    confirmed = forms.BooleanField(required=False)
    passkey_assertion = passkey_assertion_field()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.items: list[BulkItem] = []

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        raw = self.data.getlist("item") if hasattr(self.data, "getlist") else []
        if not raw:
            raise forms.ValidationError("Tick at least one preview.")
        if len(raw) > 200:
            raise forms.ValidationError("Decide at most 200 previews at once.")
        items = []
        for value in raw:
            parts = str(value).split(":")
            try:
                preview_id, digest, version = str(uuid.UUID(parts[0])), parts[1], int(parts[2])
            except (ValueError, IndexError) as error:
                raise forms.ValidationError("The list of previews was damaged; reload the queue.") from error
            if len(parts) != 3 or len(digest) != 64:
                raise forms.ValidationError("The list of previews was damaged; reload the queue.")
            items.append(BulkItem(preview_id, digest, version))
        self.items = items
        if data.get("decision") == "reject" and not data.get("note"):
            self.add_error("note", "Write a note: the customers and the audit log see why they were rejected.")
        return data


class CounterProposalForm(forms.Form):
    """A reviewer's change, with the digest of the preview they saw; the fields come from the action.

    Posted twice: first as typed (the console reads it back, "you are proposing €4.50"), then from the
    confirmation page with `reading`, the digest of the arguments it showed; only that post proposes."""

    digest = forms.CharField(max_length=64, min_length=64)
    reading = forms.CharField(max_length=64, min_length=64, required=False)

    def __init__(self, *args: Any, counter_fields: list[CounterField], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counter_fields = counter_fields
        for spec in counter_fields:
            if spec.choices:
                self.fields[spec.name] = forms.ChoiceField(
                    label=spec.label, choices=[("", "Choose…")] + [(c, c) for c in spec.choices], help_text=spec.hint
                )
            else:
                self.fields[spec.name] = forms.CharField(label=spec.label, max_length=64, help_text=spec.hint)

    def values(self) -> dict[str, str]:
        return {spec.name: str(self.cleaned_data.get(spec.name, "")) for spec in self.counter_fields}

    def typed_fields(self) -> list[forms.BoundField]:
        return [self[spec.name] for spec in self.counter_fields]


class ClaimForm(forms.Form):
    operation = forms.ChoiceField(
        choices=[("claim", "Claim"), ("take_over", "Take over"), ("release", "Release"), ("assign", "Assign")]
    )
    assignee = forms.IntegerField(required=False)
    next = forms.CharField(required=False, max_length=500)


class InternalNoteForm(forms.Form):
    body = forms.CharField(
        label="Internal note (staff only; the customer and the agent never see it)",
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
