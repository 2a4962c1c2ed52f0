"""How a preview is described to agents (JSON) and to people (words)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils import formats, timezone

from .models import ApprovalRole, Preview, PreviewStatus
from .registry import registry


def confirm_path(preview: Preview) -> str:
    return reverse("approvals:preview", kwargs={"preview_id": preview.pk})


def preview_representation(preview: Preview, *, base_url: str) -> dict[str, Any]:
    action = registry.action(preview.action)
    data: dict[str, Any] = {"id": str(preview.pk), "action": preview.action}
    if action is not None:
        data.update(action.preview_fields(preview))
    data["status"] = preview.status
    data["expires_at"] = preview.expires_at.isoformat().replace("+00:00", "Z")
    data["required_approvals"] = list(preview.required_approvals)
    if ApprovalRole.CUSTOMER in preview.required_approvals:
        data["confirm_url"] = base_url.rstrip("/") + confirm_path(preview)
    data["executed"] = preview.executed
    if preview.status == PreviewStatus.EXECUTED:
        data["result"] = preview.result
    if preview.failure_code:
        data["failure"] = {"code": preview.failure_code, "reason": preview.failure_reason}
    return data


def preview_headline(preview: Preview) -> str:
    action = registry.action(preview.action)
    return action.headline(preview) if action else preview.action


def format_datetime(value: Any) -> str:
    return formats.date_format(timezone.localtime(value), "j M Y, H:i T")


def preview_message(preview: Preview, *, base_url: str, confirm_url: str | None = None) -> str:
    """The status in words an agent can relay truthfully; 'done' only once the worker executed it."""
    headline = preview_headline(preview)
    staff_follows = ApprovalRole.STAFF in preview.required_approvals
    if preview.status == PreviewStatus.AWAITING_CUSTOMER:
        url = confirm_url or base_url.rstrip("/") + confirm_path(preview)
        text = (
            f"{headline}: nothing has happened yet. The customer must confirm this exact preview at "
            f"{url} before {format_datetime(preview.expires_at)}."
        )
        if staff_follows:
            text += " A staff member will review it after the customer confirms."
        return text
    if preview.status == PreviewStatus.AWAITING_STAFF:
        return f"{headline}: nothing has happened yet. A staff member must review and approve it."
    if preview.status == PreviewStatus.APPROVED:
        return f"{headline}: approved and being processed. It is not completed yet."
    if preview.status == PreviewStatus.EXECUTED:
        action = registry.action(preview.action)
        return action.outcome_text(preview) if action else f"{headline}: completed."
    if preview.status == PreviewStatus.FAILED:
        return f"{headline}: failed, nothing was done. Reason: {preview.failure_reason}"
    return f"{headline}: {preview.get_status_display().lower()}, nothing was done. {preview.failure_reason}".strip()


def preview_envelope(preview: Preview, *, base_url: str) -> dict[str, Any]:
    representation = preview_representation(preview, base_url=base_url)
    return {
        "ok": True,
        "executed": preview.executed,
        "status": preview.status,
        "preview": representation,
        "message": preview_message(preview, base_url=base_url, confirm_url=representation.get("confirm_url")),
    }
