"""Agent session webhooks: every preview transition pushed to the session's URL as a Standard Webhooks message.

An agent session may have a webhook URL (`create_agent_session --webhook URL`, or `webhook_url` when a
session is minted through `POST /api/agent/sessions`) and a signing secret (`whsec_…`, shown once). Each
transition of a preview the session proposed (awaiting_customer, awaiting_staff, approved, executed,
needs_attention, declined, rejected, expired, superseded, withdrawn, failed) becomes one `WebhookDelivery` row,
whose body is the same envelope as `GET /api/agent/previews/<id>` plus `"type": "preview.<status>"`, sent
with the `webhook-id`, `webhook-timestamp` and `webhook-signature` headers (`standardwebhooks`).

Deliveries never hold up what made the transition: the listener (approvals.core.transitions, after the
commit) only inserts the row and publishes the `approvals.deliver_agent_webhook` task, routed to the
`deliveries` queue, whose workers are not the ones that execute (settings.CELERY_QUEUES_BY_KIND). The
task makes one attempt within AGENT_WEBHOOK_DEADLINE_SECONDS for the whole of it (a receiver that
answers one byte at a time is cut off like one that never answers) and schedules the next with
exponential back-off and jitter, up to
AGENT_WEBHOOK_MAX_ATTEMPTS; every attempt is recorded on the row, which the console's agent-sessions page
shows. With Celery in eager mode (the embedded demo, the tests) there is no worker to hand the attempt
to, so it runs on a daemon thread instead, never in the executor's own call.

The URL is only ever http or https, and it is the agent developer's own endpoint: the gateway posts to
it from inside its network, so see docs/agents.md for the server-side request forgery considerations
(egress rules; AGENT_WEBHOOK_ALLOW_PRIVATE to allow private and loopback addresses, as the tests do).
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import logging
import random
import secrets
import socket
import threading
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from celery import shared_task
from django.conf import settings
from django.db import IntegrityError, connections, transaction
from django.db.models import Q
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from approvals.core.errors import ApplicationError, ErrorCode
from approvals.core.outbox import OutboxRetryLater, outbox_handler
from approvals.core.presentation import preview_envelope
from approvals.core.transitions import on_preview_transition
from approvals.models import AgentSession, OutboxMessage, Preview, WebhookDelivery, WebhookDeliveryStatus

logger = logging.getLogger(__name__)

SECRET_PREFIX = "whsec_"
BACKOFF_MAX_SECONDS = 3600
RESEND_AFTER_SECONDS = 600  # a pending delivery this late was lost on its way to the broker
ERROR_CHARACTERS = 500
# Only the receiver's status counts; of its body no more than this is read before hanging up.
RESPONSE_BYTES_MAX = 1024


def webhook_secret_new() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _is_private(host: str) -> bool:
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        return False  # unresolvable now: checked again when delivering
    return any(_private_address(address) for address in addresses)


def _private_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    return ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_multicast


def webhook_url_check(url: str) -> str:
    """An absolute http(s) URL with a host, no credentials in it, at most 2000 characters, and (unless
    AGENT_WEBHOOK_ALLOW_PRIVATE) not resolving to a private, loopback or link-local address."""
    if not isinstance(url, str) or len(url) > 2000:
        raise ApplicationError("The webhook URL must be at most 2000 characters.", code=ErrorCode.INVALID_WEBHOOK_URL)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ApplicationError(
            "The webhook URL must be an absolute http:// or https:// URL.", code=ErrorCode.INVALID_WEBHOOK_URL
        )
    if parts.username or parts.password:
        raise ApplicationError("The webhook URL must not carry credentials.", code=ErrorCode.INVALID_WEBHOOK_URL)
    if not settings.AGENT_WEBHOOK_ALLOW_PRIVATE and _is_private(parts.hostname):
        raise ApplicationError(
            "The webhook URL points at a private or loopback address.", code=ErrorCode.INVALID_WEBHOOK_URL
        )
    return url


def agent_session_webhook_set(session: AgentSession, url: str) -> str:
    """Give the session a webhook URL and a new signing secret; returns the secret (shown once)."""
    session.webhook_url = webhook_url_check(url)
    session.webhook_secret = webhook_secret_new()
    session.save(update_fields=["webhook_url", "webhook_secret"])
    return session.webhook_secret


def webhook_payload(preview: Preview, status: str) -> dict[str, Any]:
    """`GET /api/agent/previews/<id>`'s envelope, as the preview is now, with the transition's type."""
    body = preview_envelope(preview, base_url=settings.PUBLIC_BASE_URL)
    return {"type": f"preview.{status}", **body}


def sign(secret: str, message_id: str, sent_at: Any, body: str) -> dict[str, str]:
    """The three Standard Webhooks headers for `body`."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, sent_at, body),
    }


def may_have_webhook(preview: Preview) -> bool:
    """Whether the preview's agent session may have a webhook URL, from what the service holds already:
    the session itself when it is loaded (a new proposal's), or `agent_session_has_webhook` read with the
    preview by the locks in approvals.core.locks. True when neither says. A session's webhook URL is
    set when the session is minted, before any preview of it exists."""
    known = getattr(preview, "agent_session_has_webhook", None)
    if known is not None:
        return bool(known)
    if preview.agent_session_id is None:
        return False
    if Preview.agent_session.is_cached(preview):
        session = preview.agent_session
        return session is not None and bool(session.webhook_url)
    return True


def preview_transition_webhook(
    preview_id: str, previous_status: str, status: str, *, message_id: str | None = None, publish: bool = True
) -> int | None:
    """Record the message for the proposing session's webhook, if it has one, and hand it to a worker.
    (The proposal, confirmation and execution paths do not get here for a session without one:
    may_have_webhook already said so inside their transaction.) `message_id` is the outbox message's:
    a message handed over twice records one delivery, under the same webhook-id. Returns the delivery's
    id (None without a webhook); `publish=False` leaves its attempts to the caller."""
    preview = (
        Preview.objects.select_related("agent_session").filter(pk=preview_id, agent_session__webhook_url__gt="").first()
    )
    if preview is None:
        return None
    session = preview.agent_session
    assert session is not None  # the filter above found this session's webhook URL
    if message_id is not None:
        recorded = WebhookDelivery.objects.filter(message_id=message_id).values_list("pk", flat=True).first()
        if recorded is not None:
            return recorded  # recorded by an earlier hand-over
    try:
        with transaction.atomic():
            delivery = WebhookDelivery.objects.create(
                agent_session=session,
                preview=preview,
                message_id=message_id or f"msg_{uuid.uuid4().hex}",
                event_type=f"preview.{status}",
                url=session.webhook_url,
                payload=webhook_payload(preview, status),
            )
    except IntegrityError:
        return WebhookDelivery.objects.filter(message_id=message_id).values_list("pk", flat=True).first()
    if publish:
        _publish(delivery.pk)
    return delivery.pk


AGENT_WEBHOOK_OUTBOX_KIND = "agent_webhook"
on_preview_transition(preview_transition_webhook, interested=may_have_webhook, outbox_kind=AGENT_WEBHOOK_OUTBOX_KIND)


@outbox_handler(AGENT_WEBHOOK_OUTBOX_KIND, queue="deliveries")
def agent_webhook_owed(message: OutboxMessage) -> None:
    """The outbox's message for a transition: the delivery recorded under the message's id (its webhook-id),
    attempted here; the message stays owed until the receiver took it (or the delivery gave up), so a
    broker that loses a task loses no webhook. (Eagerly, the demo's and the tests', attempts run on a
    thread of their own, as they always have.)"""
    payload = message.payload
    eager = settings.CELERY_TASK_ALWAYS_EAGER
    delivery_id = preview_transition_webhook(
        str(payload["preview_id"]),
        str(payload["previous_status"]),
        str(payload["status"]),
        message_id=message.message_id,
        publish=eager,
    )
    if delivery_id is None or eager:
        return
    retry_in = webhook_attempt(delivery_id)
    if retry_in is not None:
        raise OutboxRetryLater(retry_in, "the agent's webhook did not take it")


def _publish(delivery_id: int, countdown: float = 0) -> None:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        timer = threading.Timer(countdown, _attempt_in_thread, args=(delivery_id,))
        timer.daemon = True
        timer.start()
        return
    try:
        deliver_agent_webhook.apply_async((delivery_id,), countdown=countdown)
    except Exception:  # noqa: BLE001 - a broker outage must not fail the transition; the row stays pending
        logger.warning("Could not publish webhook delivery %s", delivery_id, exc_info=True)


def _attempt_in_thread(delivery_id: int) -> None:
    try:
        retry_in = webhook_attempt(delivery_id)
        if retry_in is not None:
            _publish(delivery_id, retry_in)
    except Exception:  # noqa: BLE001 - a thread has no one to report to but the log
        logger.exception("Webhook delivery %s failed", delivery_id)
    finally:
        connections.close_all()  # this thread's own connections; it ends here


def _backoff(attempts: int) -> float:
    base = float(settings.AGENT_WEBHOOK_BACKOFF_SECONDS)
    return random.uniform(base / 2, min(BACKOFF_MAX_SECONDS, base * 2 ** (attempts - 1)))


def post_within_deadline(url: str, body: bytes, headers: dict[str, str], deadline_seconds: float) -> int:
    """POST `body` and return the answer's status. Everything (the address check, connecting, sending,
    the answer's head and up to RESPONSE_BYTES_MAX of its body) happens within `deadline_seconds`, or
    TimeoutError. httpx's own time-outs apply to each read, which a receiver sending a byte now and
    then never exceeds; a timer over the whole exchange does not care how the bytes come."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(_post(url, body, headers, deadline_seconds), deadline_seconds))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        # Does not wait for an address lookup still running on the loop's executor thread: it ends on its own.
        loop.close()


async def _post(url: str, body: bytes, headers: dict[str, str], deadline_seconds: float) -> int:
    host = urlsplit(url).hostname or ""
    if not settings.AGENT_WEBHOOK_ALLOW_PRIVATE and await asyncio.get_running_loop().run_in_executor(
        None, _is_private, host
    ):
        raise ValueError(f"{host} resolves to a private or loopback address")
    async with (
        httpx.AsyncClient(timeout=deadline_seconds, follow_redirects=False) as client,
        client.stream("POST", url, content=body, headers=headers) as response,
    ):
        read = 0
        async for chunk in response.aiter_raw():  # left unfinished: closed with the response, then the loop
            read += len(chunk)
            if read >= RESPONSE_BYTES_MAX:
                break
        return response.status_code


def webhook_attempt(delivery_id: int) -> float | None:
    """One attempt; records it. Returns the seconds until the next attempt, or None when done."""
    delivery = WebhookDelivery.objects.select_related("agent_session").filter(pk=delivery_id).first()
    if delivery is None or delivery.status != WebhookDeliveryStatus.PENDING:
        return None
    body = json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False)
    headers = {
        "content-type": "application/json",
        "user-agent": "approval-gateway-webhooks/1",
        **sign(delivery.agent_session.webhook_secret, delivery.message_id, timezone.now(), body),
    }
    error, status_code = "", None
    deadline = float(settings.AGENT_WEBHOOK_DEADLINE_SECONDS)
    try:
        status_code = post_within_deadline(delivery.url, body.encode("utf-8"), headers, deadline)
        if not 200 <= status_code < 300:
            error = f"HTTP {status_code}"
    except TimeoutError:
        error = f"Deadline: no whole answer within {deadline:g} s"
    except (httpx.HTTPError, ValueError, OSError) as failure:
        error = f"{type(failure).__name__}: {failure}"
    delivery.attempts += 1
    delivery.last_status_code = status_code
    delivery.last_error = error[:ERROR_CHARACTERS]
    retry_in = None
    if not error:
        delivery.status, delivery.delivered_at, delivery.next_attempt_at = (
            WebhookDeliveryStatus.DELIVERED,
            timezone.now(),
            None,
        )
    elif delivery.attempts >= settings.AGENT_WEBHOOK_MAX_ATTEMPTS:
        delivery.status, delivery.next_attempt_at = WebhookDeliveryStatus.FAILED, None
    else:
        retry_in = _backoff(delivery.attempts)
        delivery.next_attempt_at = timezone.now() + timedelta(seconds=retry_in)
    delivery.save(
        update_fields=["attempts", "last_status_code", "last_error", "status", "delivered_at", "next_attempt_at"]
    )
    return retry_in


@shared_task(name="approvals.deliver_agent_webhook", ignore_result=True)
def deliver_agent_webhook(delivery_id: int, **kwargs: Any) -> None:
    retry_in = webhook_attempt(delivery_id)
    if retry_in is not None:
        _publish(delivery_id, retry_in)


@shared_task(name="approvals.resend_due_webhooks", ignore_result=True)
def resend_due_webhooks(**kwargs: Any) -> int:
    """Beat's safety net: pending deliveries whose publication was lost (a broker outage) are sent again."""
    overdue = timezone.now() - timedelta(seconds=RESEND_AFTER_SECONDS)
    due = WebhookDelivery.objects.filter(status=WebhookDeliveryStatus.PENDING).filter(
        Q(next_attempt_at__lte=overdue) | Q(next_attempt_at__isnull=True, created_at__lte=overdue)
    )
    ids = list(due.values_list("pk", flat=True)[:500])
    for delivery_id in ids:
        _publish(delivery_id)
    return len(ids)


def webhook_deliveries_recent(limit: int = 50) -> list[WebhookDelivery]:
    """The latest deliveries of live agent sessions, newest first, for the console."""
    return list(
        WebhookDelivery.objects.filter(
            agent_session__revoked_at__isnull=True, agent_session__expires_at__gt=timezone.now()
        )
        .select_related("agent_session__user")
        .order_by("-created_at", "-pk")[:limit]
    )
