"""Who clicked and what they decided: the mapping to a staff account, the link token, the decision through
the one decision service, replies to the clicker, and the seen signatures."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from approvals.console.review_messages import absolute, console_url
from approvals.console.slack.client import (
    LINK_MAX_AGE_SECONDS,
    LINK_SALT,
    SLACK_FAILURES,
    slack_call,
)
from approvals.console.slack.messages import (
    section_block,
)
from approvals.core.errors import DecisionError, ErrorCode
from approvals.core.services import Decision, preview_decide, staff_right_error
from approvals.core.stepup import step_up_words
from approvals.models import (
    ApprovalRole,
    Preview,
    PreviewStatus,
    SlackReviewMessage,
    SlackSeenRequest,
    SlackUserLink,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)


# Who clicked, and their decision -----------------------------------------------------------------


def staff_for_slack_user(slack_user_id: str) -> User | None:
    """The active staff member behind a Slack user: the one who linked that Slack user in the console,
    or else the one active staff member whose email is that Slack user's confirmed email
    (users.info; needs users:read.email). None when there is no such one person."""
    link = SlackUserLink.objects.select_related("user").filter(slack_user_id=slack_user_id).first()
    if link is not None:
        user = link.user
        return user if user.is_active and user.is_staff else None
    try:
        found = slack_call("users_info", user=slack_user_id)["user"]
    except SLACK_FAILURES:
        logger.warning("users.info failed for a Slack reviewer", exc_info=True)
        return None
    email = (found.get("profile") or {}).get("email") or ""
    if found.get("deleted") or found.get("is_bot") or found.get("is_email_confirmed") is not True or not email:
        return None
    # Someone who linked a Slack user explicitly is that Slack user only.
    people = list(
        get_user_model()
        .objects.filter(is_active=True, is_staff=True, email__iexact=email, slack_link__isnull=True)
        .order_by("pk")[:2]
    )
    return people[0] if len(people) == 1 else None


def link_token(slack_user_id: str) -> str:
    return signing.dumps(slack_user_id, salt=LINK_SALT)


def link_token_user(token: str) -> str | None:
    """The Slack user id a link token was made for, while it is fresh; None otherwise."""
    try:
        value = signing.loads(token, salt=LINK_SALT, max_age=LINK_MAX_AGE_SECONDS)
    except signing.BadSignature:
        return None
    return value if isinstance(value, str) else None


def link_url(slack_user_id: str) -> str:
    return absolute(reverse("console:slack_link")) + "?token=" + link_token(slack_user_id)


@dataclass(frozen=True)
class ButtonValue:
    preview_id: str
    digest: str
    subject_version: int

    @classmethod
    def parse(cls, value: str) -> ButtonValue | None:
        parts = value.split(":") if isinstance(value, str) else []
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        try:
            preview_id = str(uuid.UUID(parts[0]))
        except ValueError:
            return None
        return cls(preview_id, parts[1], int(parts[2]))


def review_channel(preview_id: str) -> str:
    message = SlackReviewMessage.objects.filter(preview_id=preview_id).first()
    return message.channel if message else settings.SLACK_REVIEW_CHANNEL


def tell(slack_user_id: str, channel: str, text: str, *, link: bool = False) -> None:
    """An ephemeral message only this Slack user sees."""
    blocks: list[dict[str, Any]] = [section_block(text)]
    if link:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "link_account",
                        "text": {"type": "plain_text", "text": "Link my Slack account"},
                        "url": link_url(slack_user_id),
                    }
                ],
            }
        )
    try:
        slack_call("chat_postEphemeral", channel=channel, user=slack_user_id, text=text, blocks=blocks)
    except SLACK_FAILURES:
        logger.warning("Could not tell a Slack reviewer: %s", text, exc_info=True)


UNMAPPED = (
    "Nothing was decided: the gateway does not know which staff member you are. Link your Slack account "
    "to your staff account (the button opens the console), or ask for your Slack email to be your "
    "staff account's."
)


def preview_for_button(value: ButtonValue) -> Preview | None:
    return Preview.objects.select_related("actor").filter(pk=value.preview_id).first()


def reject_refusal(person: User, value: ButtonValue) -> str | None:
    """Why `person` cannot reject this preview now (asked before the modal opens; the decision service
    asks again when the reason arrives), or None."""
    preview = preview_for_button(value)
    if preview is None:
        return "Nothing was decided: there is no such preview."
    if preview.status != PreviewStatus.AWAITING_STAFF:
        return f"Nothing was decided: this preview is {preview.get_status_display().lower()}."
    error = staff_right_error(preview, person, approving=False)
    return f"Nothing was decided: {error.message}" if error else None


def slack_decide(
    *, person: User, slack_user_id: str, value: ButtonValue, decision: Decision, note: str = ""
) -> str | None:
    """`person`'s decision, from Slack, through the one decision path; returns the refusal in words, or None."""
    preview = preview_for_button(value)
    if preview is None:
        return "Nothing was decided: there is no such preview."
    if preview.subject_version != value.subject_version:
        error = DecisionError(
            "This message is not the version of the preview it shows; open it in the console.",
            code=ErrorCode.VERSION_MISMATCH,
        )
        return f"Nothing was decided: {error.message}"
    came_from = f"slack:{slack_user_id}"
    try:
        preview_decide(
            preview_id=preview.pk,
            person=person,
            role=ApprovalRole.STAFF,
            digest=value.digest,
            decision=decision,
            note=note,
            basis=came_from,
            channel=came_from,
        )
    except DecisionError as error:
        if error.code == ErrorCode.STEP_UP_REQUIRED:
            # Slack cannot ask for a passkey: the console can, on the preview's page.
            why = step_up_words(preview, ApprovalRole.STAFF)
            return (
                f"Nothing was decided: {why} Slack cannot ask for a passkey; approve it in the console: "
                f"{console_url(preview)}"
            )
        return f"Nothing was decided: {error.message}"
    except Preview.DoesNotExist:
        return "Nothing was decided: there is no such preview."
    return None


def request_seen(signature: str) -> bool:
    """Record a verified request's signature; True when it was recorded before (a replay)."""
    SlackSeenRequest.objects.filter(seen_at__lt=timezone.now() - timedelta(minutes=10)).delete()
    try:
        with transaction.atomic():
            SlackSeenRequest.objects.create(signature=signature)
    except IntegrityError:
        return True
    return False
