"""Reviewing in Slack: every preview that starts waiting for staff is posted to SLACK_REVIEW_CHANNEL as a
Block Kit message (the console's summary, with Approve, Reject and "Open in the console"), and every later
change of the preview replaces that message (chat.update), so that no button stays after a decision.

Posting follows the reviewer digest's batching (approvals.console.notifications): the first preview that starts
waiting in a window of REVIEW_NOTIFY_BATCH_SECONDS publishes `approvals.slack_post_review` to run at the
window's end, and that run posts everything still waiting without a message. Up to MESSAGES_PER_BATCH
previews get a message each; a bigger burst gets one summary message without buttons (the queue decides
those). Beat runs the same task as a safety net: it also posts what a lost publication missed and
brings up to date every message that shows an earlier status than its preview's (a failed chat.update).

Slack's rate limits: a 429 stops every call until its Retry-After has passed (shared through the cache),
and the task is published again for then; nothing is retried at once.

The decisions themselves arrive at approvals.console.slack_views; this module maps the clicker to a staff
account (`staff_for_slack_user`) and decides through the one decision path (`slack_decide`).

Nothing runs unless SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET and SLACK_REVIEW_CHANNEL are all set.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from celery import shared_task
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timeuntil
from prometheus_client import Counter
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from approvals.console.review_messages import Item, absolute, console_url
from approvals.console.selectors import queue_rows
from approvals.core.errors import DecisionError, ErrorCode
from approvals.core.money import format_minor
from approvals.core.presentation import preview_execution, preview_state_words
from approvals.core.registry import registry
from approvals.core.services import Decision, preview_decide, staff_right_error
from approvals.core.transitions import on_preview_transition
from approvals.core.words import customer_named, quoted, slack_escaped
from approvals.models import (
    ApprovalRole,
    AuditEvent,
    Preview,
    PreviewStatus,
    SlackReviewMessage,
    SlackSeenRequest,
    SlackUserLink,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

POST_TASK = "approvals.slack_post_review"
UPDATE_TASK = "approvals.slack_update_review"
MESSAGES_PER_BATCH = 10  # more previews waiting at once than this are a burst: one summary message
SUMMARY_LINES = 20
STALE_UPDATES_PER_RUN = 50
PAUSE_KEY = "approvals:slack:paused-until"
KICK_KEY = "approvals:slack:kick"
POST_LOCK = "approvals:slack:post-lock"
POST_LOCK_SECONDS = 600
LINK_SALT = "approvals.slack.link"
LINK_MAX_AGE_SECONDS = 900
ROWS_SHOWN = 12  # facts or request rows in one section (Slack cuts a section's text at 3000 characters)

APPROVE, REJECT, OPEN_CONSOLE = "approve", "reject", "open_console"
REJECT_CALLBACK = "slack_reject"
NOTE_BLOCK = NOTE_INPUT = "note"

slack_calls = Counter(
    "gateway_slack_api_calls",
    "Slack Web API calls by method and outcome (ok, rate_limited, error).",
    ["method", "outcome"],
)


def slack_configured() -> bool:
    return bool(settings.SLACK_BOT_TOKEN and settings.SLACK_SIGNING_SECRET and settings.SLACK_REVIEW_CHANNEL)


# Talking to Slack --------------------------------------------------------------------------------


class SlackRateLimited(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"Slack asked to wait {retry_after:g} s")
        self.retry_after = retry_after


# What a call to Slack may fail with: a refusal, a rate limit, or no answer (urllib's errors are OSErrors).
SLACK_FAILURES = (SlackApiError, SlackRateLimited, OSError)


def _client() -> WebClient:
    base_url = settings.SLACK_API_URL if settings.SLACK_API_URL.endswith("/") else settings.SLACK_API_URL + "/"
    # No retry handlers: a repeated chat.postMessage posts twice, and a 429 is waited out, not retried.
    return WebClient(
        token=settings.SLACK_BOT_TOKEN, base_url=base_url, timeout=settings.SLACK_TIMEOUT_SECONDS, retry_handlers=[]
    )


def _retry_after(error: SlackApiError) -> float:
    headers = {str(k).lower(): v for k, v in (error.response.headers or {}).items()}
    value = headers.get("retry-after")
    if isinstance(value, list):
        value = value[0] if value else None
    try:
        return max(float(value), 1.0) if value is not None else 30.0
    except (TypeError, ValueError):
        return 30.0


def _failure(error: Exception) -> str:
    return str(error.response.get("error", error)) if isinstance(error, SlackApiError) else str(error)


def paused_for() -> float:
    """Seconds left of a rate limit Slack asked us to respect (0 when none)."""
    until = cache.get(PAUSE_KEY)
    return max(float(until) - time.time(), 0.0) if until else 0.0


def slack_call(method: str, **arguments: Any) -> Any:
    """One Web API call (`method` is WebClient's, e.g. "chat_postMessage"); raises SlackRateLimited while
    Slack's Retry-After lasts, SlackApiError for any other refusal."""
    wait = paused_for()
    if wait > 0:
        raise SlackRateLimited(wait)
    try:
        response = getattr(_client(), method)(**arguments)
    except SlackApiError as error:
        if error.response.status_code == 429:
            retry_after = _retry_after(error)
            cache.set(PAUSE_KEY, time.time() + retry_after, timeout=int(retry_after) + 1)
            slack_calls.labels(method, "rate_limited").inc()
            raise SlackRateLimited(retry_after) from error
        slack_calls.labels(method, "error").inc()
        raise
    slack_calls.labels(method, "ok").inc()
    return response


# What a message says -----------------------------------------------------------------------------


def _text(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text[:3000]}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _text(text)}


def _button_value(preview: Preview) -> str:
    return f"{preview.pk}:{preview.digest}:{preview.subject_version}"


def _slack_date(moment: datetime) -> str:
    """A time Slack draws in the reader's own timezone (`<!date^…>`, with a UTC fallback)."""
    fallback = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} {{time}}|{fallback}>"


def _rows(title: str, rows: list[Any]) -> dict[str, Any] | None:
    """Rows of labelled values. Values are quoted: an action's rows may carry what the agent or the
    customer chose (a recipient, a username), and Slack gives no other way to set them apart."""
    if not rows:
        return None
    lines = [f"• {slack_escaped(row.label)}: {slack_escaped(quoted(str(row.value), limit=200))}" for row in rows]
    more = [f"… and {len(rows) - ROWS_SHOWN} more in the console"] if len(rows) > ROWS_SHOWN else []
    return _section("\n".join([title, *lines[:ROWS_SHOWN], *more]))


def _customer(preview: Preview) -> str:
    person = preview.actor
    email = f" ({quoted(person.email)})" if person.email else ""
    return slack_escaped(customer_named(person.get_username()) + email)


def _amount(preview: Preview) -> str:
    if preview.amount_minor is None or not preview.currency:
        return "none"
    return format_minor(preview.amount_minor, preview.currency)


def _quorum(preview: Preview, staff_approvals: int) -> str:
    if preview.staff_approvals_needed > 1:
        return f"{staff_approvals} of {preview.staff_approvals_needed} staff approvals"
    return "1 staff approval needed"


def _summary(preview: Preview) -> str:
    action = registry.action(preview.action)
    return action.review_summary(preview) if action else f"{preview.action} on {preview.subject_id}"


def _console_button(preview: Preview) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": OPEN_CONSOLE,
        "text": {"type": "plain_text", "text": "Open in the console"},
        "url": console_url(preview),
    }


def _decided_by(preview: Preview) -> str:
    """Who decided, from the approvals and the audit (never from the message)."""
    if preview.status == PreviewStatus.REJECTED:
        record = preview.audit_records.filter(event=AuditEvent.REJECTED).select_related("actor").last()
        if record is None or record.actor is None:
            return ""
        where = " in Slack" if str((record.result or {}).get("channel", "")).startswith("slack:") else ""
        note = (record.result or {}).get("note") or ""
        return slack_escaped(f"Rejected by {record.actor.get_username()}{where}, noting {quoted(note, limit=300)}.")
    approvals = [
        a
        for a in preview.approvals.select_related("approver").order_by("created_at")
        if a.role == ApprovalRole.STAFF and a.lapsed_at is None
    ]
    if not approvals:
        return ""
    names = ", ".join(
        a.approver.get_username() + (" (in Slack)" if a.basis.startswith("slack:") else "") for a in approvals
    )
    return slack_escaped(f"Approved by {names}.")


def message_for(preview: Preview, *, staff_approvals: int | None = None) -> tuple[str, list[dict[str, Any]]]:
    """(the fallback text, the blocks) of the preview's message as it is now: the console's summary with
    the buttons while it waits for staff, and the outcome without them once it does not."""
    row = queue_rows([preview])[0]
    summary = slack_escaped(_summary(preview))
    fingerprint = {
        "type": "context",
        "elements": [
            _text(
                f"Fingerprint `{preview.digest[:12]}`: a decision is bound to it, and refused if the preview "
                "changed first. Customer- and agent-chosen words are in quotes, marked as theirs."
            )
        ],
    }
    if preview.status != PreviewStatus.AWAITING_STAFF:
        title, _sentence = preview_state_words(preview, "staff", preview_execution(preview))
        decided = _decided_by(preview)
        reason = slack_escaped(preview.failure_reason) if preview.failure_reason else ""
        outcome_lines = [line for line in (decided, "" if decided.startswith("Rejected") else reason) if line]
        blocks = [
            {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
            _section(summary),
            *([_section("\n".join(outcome_lines))] if outcome_lines else []),
            fingerprint,
            {"type": "actions", "block_id": "review", "elements": [_console_button(preview)]},
        ]
        return slack_escaped(f"{title}: ") + summary, blocks
    action = registry.action(preview.action)
    value = _button_value(preview)
    have = row.staff_approvals if staff_approvals is None else staff_approvals
    fields = [
        _text(f"*Action*\n{slack_escaped(preview.action)}"),
        _text(f"*Subject*\n{slack_escaped(f'{preview.subject_type} {preview.subject_id}')}"),
        _text(f"*Amount*\n{slack_escaped(_amount(preview))}"),
        _text(f"*Customer*\n{_customer(preview)}"),
        _text(f"*Quorum*\n{_quorum(preview, have)}"),
        _text(f"*Expires*\nin {timeuntil(preview.expires_at, depth=1)} ({_slack_date(preview.expires_at)})"),
    ]
    consequence = action.consequence(preview) if action else ""
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "Waiting for staff review"}},
        _section(summary),
        {"type": "section", "fields": fields},
        *[
            block
            for block in (
                _rows("*The exact request*", action.display_rows(preview) if action else []),
                _rows("*Verified facts* (the shop's records, now)", action.review_facts(preview) if action else []),
            )
            if block
        ],
        *[_section(f":warning: *Check:* {slack_escaped(flag.text)}") for flag in row.flags],
        fingerprint,
        {
            "type": "actions",
            "block_id": "review",
            "elements": [
                {
                    "type": "button",
                    "action_id": APPROVE,
                    "style": "primary",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "value": value,
                    "confirm": {
                        "title": {"type": "plain_text", "text": "Approve this preview?"},
                        "text": {"type": "plain_text", "text": (consequence or _summary(preview))[:300]},
                        "confirm": {"type": "plain_text", "text": "Approve"},
                        "deny": {"type": "plain_text", "text": "Cancel"},
                    },
                },
                {
                    "type": "button",
                    "action_id": REJECT,
                    "style": "danger",
                    "text": {"type": "plain_text", "text": "Reject…"},
                    "value": value,
                },
                _console_button(preview),
            ],
        },
    ]
    return "Waiting for staff review: " + summary, blocks


def reject_modal(value: str) -> dict[str, Any]:
    """The modal that asks for the reason of a rejection; the button's value travels with it."""
    return {
        "type": "modal",
        "callback_id": REJECT_CALLBACK,
        "private_metadata": value,
        "title": {"type": "plain_text", "text": "Reject this preview"},
        "submit": {"type": "plain_text", "text": "Reject"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": NOTE_BLOCK,
                "label": {"type": "plain_text", "text": "Why (the customer and the agent see it)"},
                "element": {"type": "plain_text_input", "action_id": NOTE_INPUT, "multiline": True, "max_length": 1000},
            }
        ],
    }


# Posting and updating ----------------------------------------------------------------------------


@dataclass
class SyncReport:
    posted: int = 0
    summarised: int = 0
    updated: int = 0
    rate_limited_for: float = 0.0
    failures: list[str] = field(default_factory=list)
    busy: bool = False


def _post_one(preview: Preview, report: SyncReport) -> None:
    text, blocks = message_for(preview)
    response = slack_call("chat_postMessage", channel=settings.SLACK_REVIEW_CHANNEL, text=text, blocks=blocks)
    message = SlackReviewMessage.objects.create(
        preview=preview, channel=response["channel"], ts=response["ts"], shown_status=preview.status
    )
    report.posted += 1
    # Decided while it was being posted: its transition found no message to update, so do it now.
    if Preview.objects.filter(pk=preview.pk).exclude(status=message.shown_status).exists():
        message_update(message)
        report.updated += 1


def _post_summary(previews: list[Preview]) -> None:
    rows = {row.preview.pk: row for row in queue_rows(previews)}
    items = [Item(p, _summary(p), console_url(p), [f.text for f in rows[p.pk].flags]) for p in previews]
    queue = absolute(reverse("console:queue"))
    lines = [item.slack_line() for item in items[:SUMMARY_LINES]]
    if len(items) > SUMMARY_LINES:
        lines.append(f"… and {len(items) - SUMMARY_LINES} more")
    heading = (
        f"{len(items)} previews wait for staff review: too many at once to post one by one. "
        f"Decide them in the console: {queue}"
    )
    response = slack_call(
        "chat_postMessage",
        channel=settings.SLACK_REVIEW_CHANNEL,
        text=heading,
        blocks=[_section(heading), _section("\n".join(lines))],
    )
    SlackReviewMessage.objects.bulk_create(
        [
            SlackReviewMessage(
                preview=p, channel=response["channel"], ts=response["ts"], with_buttons=False, shown_status=p.status
            )
            for p in previews
        ],
        ignore_conflicts=True,
    )


def message_update(message: SlackReviewMessage) -> None:
    """Replace a preview's message by what the preview is now (raises what slack_call raises)."""
    preview = Preview.objects.select_related("actor").get(pk=message.preview_id)
    text, blocks = message_for(preview)
    slack_call("chat_update", channel=message.channel, ts=message.ts, text=text, blocks=blocks)
    message.shown_status = preview.status
    message.updated_at = timezone.now()
    message.last_error = ""
    message.save(update_fields=["shown_status", "updated_at", "last_error"])


def reviews_sync() -> SyncReport:
    """Post what waits for staff without a message yet (one each, or one summary for a burst), then bring
    up to date the messages that show an earlier status than their preview's. One run at a time."""
    report = SyncReport()
    if not slack_configured():
        return report
    if not cache.add(POST_LOCK, "1", timeout=POST_LOCK_SECONDS):
        report.busy = True
        return report
    try:
        waiting = list(
            Preview.objects.filter(status=PreviewStatus.AWAITING_STAFF, slack_message__isnull=True)
            .select_related("actor")
            .order_by("status_changed_at", "pk")[:1000]
        )
        if len(waiting) > MESSAGES_PER_BATCH:
            _post_summary(waiting)
            report.summarised = len(waiting)
        else:
            for preview in waiting:
                _post_one(preview, report)
        stale = SlackReviewMessage.objects.filter(with_buttons=True).exclude(shown_status=F("preview__status"))
        for message in stale.order_by("posted_at")[:STALE_UPDATES_PER_RUN]:
            try:
                message_update(message)
                report.updated += 1
            except SlackApiError as error:  # this message alone (deleted in Slack, say): the others go on
                message.last_error = str(error.response.get("error", "error"))[:500]
                message.save(update_fields=["last_error"])
                report.failures.append(message.last_error)
    except SlackRateLimited as limited:
        report.rate_limited_for = limited.retry_after
        logger.warning("Slack rate limit: posting waits %.0f s", limited.retry_after)
    except (SlackApiError, OSError) as error:
        report.failures.append(
            str(error.response.get("error", error)) if isinstance(error, SlackApiError) else str(error)
        )
        logger.warning("Slack refused a review message; the next run tries again", exc_info=True)
    finally:
        cache.delete(POST_LOCK)
    return report


def _eager() -> bool:
    return bool(settings.CELERY_TASK_ALWAYS_EAGER)


@shared_task(name=POST_TASK, ignore_result=True)
def slack_post_review(**kwargs: Any) -> dict[str, Any]:
    report = reviews_sync()
    if report.rate_limited_for and not _eager():
        slack_post_review.apply_async(countdown=report.rate_limited_for)
    return {"posted": report.posted, "summarised": report.summarised, "updated": report.updated}


@shared_task(name=UPDATE_TASK, ignore_result=True)
def slack_update_review(preview_id: str, **kwargs: Any) -> bool:
    message = SlackReviewMessage.objects.filter(preview_id=preview_id, with_buttons=True).first()
    if message is None or not slack_configured():
        return False
    try:
        message_update(message)
    except SlackRateLimited as limited:
        message.last_error = str(limited)
        message.save(update_fields=["last_error"])
        if not _eager():
            slack_update_review.apply_async((preview_id,), countdown=limited.retry_after)
        return False
    except (SlackApiError, OSError) as error:
        # The beat run of slack_post_review updates it later: its shown_status is still the old one.
        message.last_error = _failure(error)[:500]
        message.save(update_fields=["last_error"])
        logger.warning("Slack refused to update the message of %s", preview_id, exc_info=True)
        return False
    return True


def _publish(task: Any, *args: Any, countdown: float = 0) -> None:
    try:
        task.apply_async(args, countdown=countdown) if countdown else task.delay(*args)
    except Exception:  # noqa: BLE001 - a broker outage must not fail the transition; beat syncs later
        logger.warning("Could not publish %s; the beat run of %s catches up", task.name, POST_TASK, exc_info=True)


def _on_transition(preview_id: str, previous_status: str, status: str) -> None:
    if not slack_configured():
        return
    if status == PreviewStatus.AWAITING_STAFF:
        window = settings.REVIEW_NOTIFY_BATCH_SECONDS
        if _eager() or window <= 0:
            _publish(slack_post_review)
        elif cache.add(KICK_KEY, preview_id, timeout=window):  # the first of this window schedules the run
            _publish(slack_post_review, countdown=window)
    elif SlackReviewMessage.objects.filter(preview_id=preview_id, with_buttons=True).exists():
        _publish(slack_update_review, preview_id)


on_preview_transition(_on_transition, interested=lambda preview: slack_configured())


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
    blocks: list[dict[str, Any]] = [_section(text)]
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
        decided = preview_decide(
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
        return f"Nothing was decided: {error.message}"
    except Preview.DoesNotExist:
        return "Nothing was decided: there is no such preview."
    if decided.status == PreviewStatus.AWAITING_STAFF:  # one approval of a quorum: no transition to tell
        _publish(slack_update_review, str(decided.pk))
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
