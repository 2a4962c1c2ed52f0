"""Telling people that something waits for them, with the absolute URL of each preview's console page.

The digest task (`approvals.notify_reviewers`, on Celery beat every REVIEW_NOTIFY_INTERVAL_SECONDS)
does it in two steps:

1. It records a ReviewNotice for each preview that waits for staff and has none yet (`review_needed`),
   and for each one still waiting REVIEW_ESCALATE_AFTER_SECONDS after it entered the staff queue
   (`overdue`).
2. It sends what is pending, batched: one email per reviewer (the active staff members with the
   action's review permission, i.e. the deciding group's members) listing every preview they may
   decide, one email to REVIEW_ESCALATE_EMAILS listing the overdue ones, and one Standard Webhooks
   message per URL in REVIEW_NOTIFY_WEBHOOKS and per kind. A burst of 500 proposals is one message
   per person and URL, not 500. A channel's time on the notice is set only once the channel took the
   message, so a failed channel is tried again at the next run (webhooks with the same `webhook-id`).

The webhook body (also documented in README.md), signed with REVIEW_NOTIFY_SECRET:

    {"type": "review.needed" | "review.overdue", "count": 2, "queue_url": "https://…/console/",
     "previews": [{"id", "action", "summary", "amount_minor", "currency", "amount" (these three null for
                   a preview without an amount), "status",
                   "waiting_since", "expires_at", "url", "risk_flags": ["…"]}],
     "text": "2 previews wait for staff review: …"}

`text` is Slack- and Teams-compatible, so an incoming webhook can take the message as it is.

A counter-proposal that asks the customer again also emails the customer the link to the new preview
(approvals.core.counter publishes `approvals.notify_counter_proposal` once it commits).

The queue is scanned, so a notice cannot be lost with an after-commit callback (a crash, a broker
outage). A transition listener only makes it prompt: the first preview that starts waiting for staff
in a window of REVIEW_NOTIFY_BATCH_SECONDS publishes the digest task to run at the window's end, so a
burst is still one message (with a broker; in eager mode the beat schedule alone sends).
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from approvals.console.review_messages import (
    absolute,
    customer_url,
    digest_items,
    escalation_emails,
    reviewer_emails,
    webhook_body,
)
from approvals.core.digests import sha256_hex
from approvals.core.registry import registry
from approvals.core.services import audit_record
from approvals.core.transitions import on_preview_transition
from approvals.models import AuditEvent, Preview, PreviewStatus, ReviewNotice, ReviewNoticeKind
from approvals.operations.publish import NOTIFY_REVIEWERS, task_publish_later

logger = logging.getLogger(__name__)

BATCH_SIZE = 1000


def escalation_due_before(now: datetime | None = None) -> datetime | None:
    """Previews waiting for staff since before this are overdue; None when escalation is off."""
    seconds = settings.REVIEW_ESCALATE_AFTER_SECONDS
    if seconds <= 0:
        return None
    return (now or timezone.now()) - timedelta(seconds=seconds)


# Step 1: what is owed ----------------------------------------------------------------------------


def notices_record(now: datetime | None = None) -> int:
    """Record the notices owed now; returns how many were added."""
    waiting = Preview.objects.filter(status=PreviewStatus.AWAITING_STAFF)
    owed = [
        ReviewNotice(preview_id=pk, kind=ReviewNoticeKind.REVIEW_NEEDED)
        for pk in waiting.exclude(review_notices__kind=ReviewNoticeKind.REVIEW_NEEDED)
        .order_by("created_at")
        .values_list("pk", flat=True)[:BATCH_SIZE]
    ]
    due = escalation_due_before(now)
    if due is not None:
        owed += [
            ReviewNotice(preview_id=pk, kind=ReviewNoticeKind.OVERDUE)
            for pk in waiting.filter(status_changed_at__lte=due)
            .exclude(review_notices__kind=ReviewNoticeKind.OVERDUE)
            .order_by("created_at")
            .values_list("pk", flat=True)[:BATCH_SIZE]
        ]
    # A concurrent run may have recorded some of them: the unique (preview, kind) keeps one.
    ReviewNotice.objects.bulk_create(owed, ignore_conflicts=True)
    return len(owed)


# Step 2: sending ---------------------------------------------------------------------------------


def webhook_send(url: str, *, message_id: str, body: dict[str, Any]) -> int:
    """POST one Standard Webhooks message; returns the HTTP status (raises on a refusal or no answer)."""
    from standardwebhooks.webhooks import Webhook

    payload = json.dumps(body, separators=(",", ":"), sort_keys=True)
    now = timezone.now()
    signature = Webhook(settings.REVIEW_NOTIFY_SECRET).sign(message_id, now, payload)
    request = urllib.request.Request(
        url,
        data=payload.encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "approval-gateway-notifications",
            "webhook-id": message_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signature,
        },
    )
    with urllib.request.urlopen(request, timeout=settings.REVIEW_NOTIFY_TIMEOUT_SECONDS) as response:  # noqa: S310
        return response.status


def _still_relevant(notice: ReviewNotice) -> bool:
    return notice.preview.status == PreviewStatus.AWAITING_STAFF


@dataclass
class SendReport:
    emails: int = 0
    webhooks: int = 0
    skipped: int = 0
    failures: int = 0
    busy: bool = False


SEND_LOCK = "approvals:notify-reviewers:lock"
KICK_KEY = "approvals:notify-reviewers:kick"
SEND_LOCK_SECONDS = 600


def notices_send() -> SendReport:
    """Send every pending notice, batched by kind; mark each channel that took its message.

    Mail servers and receivers are talked to outside any transaction (no lock is held on anything else
    meanwhile); one run at a time (a cache lock, shared through Redis in production), so that a slow run
    and the next one do not send the same notices twice.
    """
    report = SendReport()
    if not cache.add(SEND_LOCK, "1", timeout=SEND_LOCK_SECONDS):
        report.busy = True
        return report
    try:
        pending = list(
            ReviewNotice.objects.select_related("preview", "preview__actor")
            .filter(Q(emailed_at__isnull=True) | Q(webhooks_sent_at__isnull=True))
            .order_by("pk")[:BATCH_SIZE]
        )
        by_kind: dict[str, list[ReviewNotice]] = defaultdict(list)
        stale: list[ReviewNotice] = []
        for notice in pending:
            (by_kind[notice.kind] if _still_relevant(notice) else stale).append(notice)
        outcomes = [_send_kind(kind, notices, report) for kind, notices in by_kind.items()]
        with transaction.atomic():
            now = timezone.now()
            for notice in stale:  # decided, expired or withdrawn meanwhile: nothing to say any more
                notice.emailed_at = notice.emailed_at or now
                notice.webhooks_sent_at = notice.webhooks_sent_at or now
                report.skipped += 1
            changed = stale + [notice for _kind, notices, _e, _h in outcomes for notice in notices]
            ReviewNotice.objects.bulk_update(
                changed, ["emailed_at", "webhooks_sent_at", "attempts", "last_error"], batch_size=500
            )
            for kind, notices, emailed, hooked in outcomes:
                _audit_sent(kind, notices, newly_emailed=emailed, newly_hooked=hooked)
    finally:
        cache.delete(SEND_LOCK)
    return report


def _send_kind(
    kind: str, notices: list[ReviewNotice], report: SendReport
) -> tuple[str, list[ReviewNotice], set[Any], set[Any]]:
    """Send one kind's batch on every channel still owed; returns what to save and audit."""
    errors: list[str] = []
    emailed: set[Any] = set()
    hooked: set[Any] = set()
    to_email = [n for n in notices if n.emailed_at is None]
    if to_email:
        items = digest_items([n.preview for n in to_email])
        messages = reviewer_emails(items) if kind == ReviewNoticeKind.REVIEW_NEEDED else escalation_emails(items)
        try:
            if messages:
                with get_connection() as connection:
                    connection.send_messages(messages)
            report.emails += len(messages)
            sent_at = timezone.now()
            for notice in to_email:
                notice.emailed_at = sent_at
                if messages:
                    emailed.add(notice.pk)
        except Exception as error:  # noqa: BLE001 - any mail failure leaves the notices pending
            logger.warning("Reviewer notification email failed; retried at the next run", exc_info=True)
            errors.append(f"email: {error}")
    to_hook = [n for n in notices if n.webhooks_sent_at is None]
    if to_hook:
        urls = settings.REVIEW_NOTIFY_WEBHOOKS
        delivered = True
        if urls and not settings.REVIEW_NOTIFY_SECRET:
            delivered = False
            errors.append("webhooks: REVIEW_NOTIFY_SECRET is not set; nothing is sent unsigned")
        elif urls:
            body = webhook_body(kind, digest_items([n.preview for n in to_hook]))
            message_id = "msg_" + sha256_hex(kind + ":" + ",".join(str(n.pk) for n in to_hook))[:32]
            for url in urls:
                try:
                    webhook_send(url, message_id=message_id, body=body)
                    report.webhooks += 1
                except Exception as error:  # noqa: BLE001 - a receiver that fails is tried again later
                    logger.warning("Reviewer notification webhook to %s failed", url, exc_info=True)
                    errors.append(f"webhook {url}: {error}")
                    delivered = False
        if delivered:
            sent_at = timezone.now()
            for notice in to_hook:
                notice.webhooks_sent_at = sent_at
                if urls:
                    hooked.add(notice.pk)
    if errors:
        report.failures += 1
        for notice in notices:
            notice.attempts += 1
            notice.last_error = "; ".join(errors)[:2000]
    return kind, notices, emailed, hooked


def _audit_sent(kind: str, notices: list[ReviewNotice], *, newly_emailed: set[Any], newly_hooked: set[Any]) -> None:
    """One audit record per preview that a channel told about, for its timeline."""
    event = AuditEvent.REVIEW_ESCALATED if kind == ReviewNoticeKind.OVERDUE else AuditEvent.REVIEWERS_NOTIFIED
    for notice in notices:
        channels = (["email"] if notice.pk in newly_emailed else []) + (
            ["webhooks"] if notice.pk in newly_hooked else []
        )
        if channels:
            facts: dict[str, Any] = {"kind": kind, "channels": channels}
            if kind == ReviewNoticeKind.OVERDUE and "email" in channels:
                facts["emailed"] = list(settings.REVIEW_ESCALATE_EMAILS)
            audit_record(event=event, preview=notice.preview, result=facts)


def notify_reviewers(now: datetime | None = None) -> SendReport:
    """The digest task's work: record what is owed, then send it."""
    notices_record(now)
    return notices_send()


# The customer asked again after a counter-proposal -----------------------------------------------


def counter_proposal_email(preview_id: str) -> bool:
    """Email the customer the page of a counter-proposal that needs their confirmation."""
    preview = Preview.objects.select_related("actor").filter(pk=preview_id).first()
    if preview is None or preview.status != PreviewStatus.AWAITING_CUSTOMER or not preview.actor.email:
        return False
    action = registry.action(preview.action)
    headline = action.headline(preview) if action else preview.action
    body = (
        f"Hello {preview.actor.get_username()},\n\n"
        f"Our support team changed your request: {headline}.\n"
        "Nothing has been done yet. Please look at it and confirm or decline it here:\n"
        f"{customer_url(preview)}\n"
    )
    EmailMessage(
        subject=f"[{settings.SHOP_NAME}] Please confirm the changed request",
        body=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[preview.actor.email],
    ).send()
    return True


# A lead removed a staff member's passkeys ------------------------------------------------------------


def passkeys_removed_email(user_id: int, *, lead: str, names: list[str]) -> bool:
    """Tell a staff member that a lead removed their passkeys (a lost device): if it was not at their
    request, they say so at once. False when they have no email address."""
    person = get_user_model().objects.filter(pk=user_id).first()
    if person is None or not person.email:
        return False
    listed = ", ".join(repr(name) for name in names)
    body = (
        f"Hello {person.get_username()},\n\n"
        f"{lead} removed your passkeys ({listed}) from your staff account, as is done for a lost device.\n"
        "Approvals that need a passkey are refused until you register a new one in the console:\n"
        f"{absolute(reverse('console_passkeys:list'))}\n\n"
        f"If you did not ask for this, tell {lead} or your security contact now.\n"
    )
    EmailMessage(
        subject=f"[{settings.SHOP_NAME}] Your passkeys were removed",
        body=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[person.email],
    ).send()
    return True


def _kick_on_waiting(preview_id: str, previous_status: str, status: str) -> None:
    """A preview started waiting for staff: have the digest run at the end of this batch window."""
    if status != PreviewStatus.AWAITING_STAFF or settings.CELERY_TASK_ALWAYS_EAGER:
        return
    window = settings.REVIEW_NOTIFY_BATCH_SECONDS
    try:
        if not cache.add(KICK_KEY, preview_id, timeout=window):
            return  # already scheduled for this window
        task_publish_later(NOTIFY_REVIEWERS, countdown=window)
    except Exception:  # noqa: BLE001 - the beat schedule sends anyway
        logger.warning("Could not schedule the reviewer digest; the beat schedule will send it", exc_info=True)


def register() -> None:
    """Listen to transitions when there is a broker to schedule the digest on. In eager mode (the demo,
    the tests) the listener could do nothing, and it is left out so that transitions queue no callback."""
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        on_preview_transition(_kick_on_waiting)
