"""Posting and updating the review messages: the batching, the tasks on the notifications queue, the transition
listener that replaces a message on every change."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from slack_sdk.errors import SlackApiError

from approvals.console.review_messages import Item, absolute, console_url
from approvals.console.selectors import queue_rows
from approvals.console.slack.client import (
    KICK_KEY,
    MESSAGES_PER_BATCH,
    POST_LOCK,
    POST_LOCK_SECONDS,
    POST_TASK,
    STALE_UPDATES_PER_RUN,
    SUMMARY_LINES,
    UPDATE_TASK,
    SlackRateLimited,
    failure_words,
    slack_call,
    slack_configured,
)
from approvals.console.slack.messages import (
    message_for,
    preview_summary,
    section_block,
)
from approvals.core.transitions import on_preview_transition
from approvals.models import (
    Preview,
    PreviewStatus,
    SlackReviewMessage,
)

logger = logging.getLogger(__name__)


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
    items = [Item(p, preview_summary(p), console_url(p), [f.text for f in rows[p.pk].flags]) for p in previews]
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
        blocks=[section_block(heading), section_block("\n".join(lines))],
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
        message.last_error = failure_words(error)[:500]
        message.save(update_fields=["last_error"])
        logger.warning("Slack refused to update the message of %s", preview_id, exc_info=True)
        return False
    return True


def publish_task(task: Any, *args: Any, countdown: float = 0) -> None:
    try:
        task.apply_async(args, countdown=countdown) if countdown else task.delay(*args)
    except Exception:  # noqa: BLE001 - a broker outage must not fail the transition; beat syncs later
        logger.warning("Could not publish %s; the beat run of %s catches up", task.name, POST_TASK, exc_info=True)


def _on_transition(preview_id: str, previous_status: str, status: str) -> None:
    if not slack_configured():
        return
    if status == previous_status:  # the same status with something else changed (a quorum's count)
        if SlackReviewMessage.objects.filter(preview_id=preview_id, with_buttons=True).exists():
            publish_task(slack_update_review, preview_id)
        return
    if status == PreviewStatus.AWAITING_STAFF:
        window = settings.REVIEW_NOTIFY_BATCH_SECONDS
        if _eager() or window <= 0:
            publish_task(slack_post_review)
        elif cache.add(KICK_KEY, preview_id, timeout=window):  # the first of this window schedules the run
            publish_task(slack_post_review, countdown=window)
    elif SlackReviewMessage.objects.filter(preview_id=preview_id, with_buttons=True).exists():
        publish_task(slack_update_review, preview_id)


on_preview_transition(_on_transition, interested=lambda preview: slack_configured())
