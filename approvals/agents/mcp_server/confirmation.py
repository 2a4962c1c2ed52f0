"""What MCP says around the customer's confirmation: the elicitation's message, written to the customer who
reads it, and the result after they came back without confirming (declined, cancelled, or the page left)."""

from __future__ import annotations

from typing import Any

from approvals.core.presentation import format_datetime, preview_headline
from approvals.models import Preview, PreviewStatus

# What the client said of the elicitation (ElicitResult.action), in words for the agent.
CAME_BACK = {
    "decline": "The customer declined to open the confirmation page",
    "cancel": "The customer dismissed the confirmation request",
    "accept": "The customer opened the confirmation page but has not confirmed",
}


def confirmation_request_words(preview_id: str) -> str:
    """The elicitation's message: the client shows it to the customer, so it speaks to them."""
    preview = Preview.objects.get(pk=preview_id)
    return (
        f"Please check this request and confirm it on the page if it is right: {preview_headline(preview)}. "
        f"Nothing happens unless you confirm it there before {format_datetime(preview.expires_at)}."
    )


def not_confirmed_words(body: dict[str, Any], action: str | None) -> str | None:
    """For the retry of an elicitation: the text when the preview still waits for the customer, saying that
    they came back without confirming instead of repeating the first answer. None when it moved on."""
    if not body.get("ok") or body.get("status") != PreviewStatus.AWAITING_CUSTOMER:
        return None
    preview = Preview.objects.get(pk=body["preview"]["id"])
    came_back = CAME_BACK.get(action or "", "The customer has not confirmed")
    return (
        f"{came_back}: nothing has happened. {preview_headline(preview)} still waits for their confirmation at "
        f"{body['preview']['confirm_url']} until {format_datetime(preview.expires_at)}, then expires. Ask them "
        "what they want; do not propose it again unless they ask for something different."
    )
