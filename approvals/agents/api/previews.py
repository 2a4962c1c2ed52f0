"""Reading previews back: a session's own list (a restarted agent recovers its work) and the long-poll.

The long-poll (`GET /api/agent/previews/<id>?wait=N`) answers as soon as the preview's status or its
execution's outcome differs from what it was when the request came, or after N seconds with the state
unchanged. A waiting request holds one of its web process's threads (gunicorn's gthread workers), and a
request past GUNICORN_TIMEOUT (30 s) is killed. So the wait is capped at AGENT_PREVIEW_WAIT_MAX_SECONDS
(10 by default), checked every AGENT_PREVIEW_WAIT_POLL_SECONDS (0.5) with one indexed read of two
columns, and the answer says how long it waited (`Preview-Waited-Seconds`); an agent that asked for 30
simply asks again. Agents that must not poll at all register a webhook.

Waits are bounded twice, so that they never take the threads the pages and proposals need: per agent
session (AGENT_PREVIEW_WAITS_PER_SESSION_MAX, counted in the shared cache, so across processes and
hosts) and per web process (AGENT_PREVIEW_WAITS_MAX, half its threads). A request over either answers
the state as it is now, at once, with `Preview-Wait-Declined: session` or `process`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import QuerySet

from approvals.core.services import preview_refresh
from approvals.models import Preview, PreviewStatus

# A preview in these states changes no more (needs_attention still ends in executed or failed).
FINAL_STATUSES = frozenset(
    {
        PreviewStatus.EXECUTED,
        PreviewStatus.DECLINED,
        PreviewStatus.REJECTED,
        PreviewStatus.EXPIRED,
        PreviewStatus.SUPERSEDED,
        PreviewStatus.FAILED,
        PreviewStatus.WITHDRAWN,
    }
)


def _state(preview_id: Any) -> tuple[str, str | None] | None:
    row = Preview.objects.filter(pk=preview_id).values_list("status", "execution__outcome").first()
    return (row[0], row[1]) if row is not None else None


logger = logging.getLogger(__name__)

# The waits this process holds now (its threads share it).
_process_waits = 0
_process_waits_lock = threading.Lock()
# A slot a killed process never gave back expires this long after the longest wait could have ended.
SESSION_SLOT_GRACE_SECONDS = 30


@contextmanager
def _process_wait_slot() -> Iterator[bool]:
    global _process_waits
    with _process_waits_lock:
        taken = _process_waits < settings.AGENT_PREVIEW_WAITS_MAX
        if taken:
            _process_waits += 1
    try:
        yield taken
    finally:
        if taken:
            with _process_waits_lock:
                _process_waits -= 1


def _session_slot_take(key: str) -> int | None:
    """The session's waits including this one, or None when the cache does not answer."""
    timeout = settings.AGENT_PREVIEW_WAIT_MAX_SECONDS + SESSION_SLOT_GRACE_SECONDS
    try:
        cache.add(key, 0, timeout=timeout)
        try:
            return cache.incr(key)
        except ValueError:  # expired between add and incr: count afresh
            cache.add(key, 1, timeout=timeout)
            return 1
    except Exception:  # noqa: BLE001 - a cache outage must not fail a read; the process limit still holds
        logger.warning("Could not count the session's waits", exc_info=True)
        return None


@contextmanager
def _session_wait_slot(session_id: int) -> Iterator[bool]:
    key = f"preview-waits:{session_id}"
    holding = _session_slot_take(key)
    try:
        yield holding is None or holding <= settings.AGENT_PREVIEW_WAITS_PER_SESSION_MAX
    finally:
        if holding is not None:
            try:
                cache.decr(key)
            except Exception:  # noqa: BLE001 - expired meanwhile, or the cache is gone: the key's expiry gives it back
                logger.debug("Could not give back a wait slot", exc_info=True)


def preview_wait(preview: Preview, wait_seconds: float, session_id: int) -> tuple[Preview, float, str | None]:
    """Wait for a change (preview_wait_for_change) if the session and this process have a wait slot free;
    returns the preview, the seconds waited and which limit declined the wait (`session`, `process`) or None."""
    with _session_wait_slot(session_id) as session_may_wait:
        if not session_may_wait:
            return preview, 0.0, "session"
        with _process_wait_slot() as process_may_wait:
            if not process_may_wait:
                return preview, 0.0, "process"
            preview, waited = preview_wait_for_change(preview, wait_seconds)
            return preview, waited, None


def preview_wait_for_change(preview: Preview, wait_seconds: float) -> tuple[Preview, float]:
    """Wait up to `wait_seconds` (capped) for the preview to change; returns it as it is now and the
    seconds waited."""
    started = time.monotonic()
    wait_seconds = max(0.0, min(float(wait_seconds), float(settings.AGENT_PREVIEW_WAIT_MAX_SECONDS)))
    before = _state(preview.pk)
    if before is None or before[0] in FINAL_STATUSES:
        return preview, 0.0
    deadline = started + wait_seconds
    poll = max(float(settings.AGENT_PREVIEW_WAIT_POLL_SECONDS), 0.05)
    while True:
        # An approval window that ends while waiting is a change too.
        if preview.status in (PreviewStatus.AWAITING_CUSTOMER, PreviewStatus.AWAITING_STAFF):
            preview_refresh(preview=preview)
        now = _state(preview.pk)
        if now != before:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(poll, remaining))
    preview.refresh_from_db()
    preview._state.fields_cache.pop("execution", None)
    return preview, time.monotonic() - started


def session_previews(session: Any, statuses: list[str] | None) -> QuerySet[Preview]:
    """The previews this agent session proposed, newest first."""
    previews = Preview.objects.filter(agent_session=session).select_related("execution", "proposed_by")
    if statuses:
        previews = previews.filter(status__in=statuses)
    return previews.order_by("-created_at", "-pk")
