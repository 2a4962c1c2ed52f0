"""Reading previews back: a session's own list (a restarted agent recovers its work) and the long-poll.

The long-poll (`GET /api/agent/previews/<id>?wait=N`) answers as soon as the preview's status or its
execution's outcome differs from what it was when the request came, or after N seconds with the state
unchanged. The web tier runs gunicorn's sync workers, one request per worker: a waiting request holds
its worker, and a request past GUNICORN_TIMEOUT (30 s) is killed. So the wait is capped at
AGENT_PREVIEW_WAIT_MAX_SECONDS (10 by default), checked every AGENT_PREVIEW_WAIT_POLL_SECONDS (0.5) with
one indexed read of two columns, and the answer says how long it waited (`Preview-Waited-Seconds`);
an agent that asked for 30 simply asks again. Agents that must not poll at all register a webhook.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from ..models import ExecutionOutcome, Preview, PreviewStatus
from ..services import preview_refresh

# A preview in these states changes no more (needs_attention still ends in executed or failed).
FINAL_STATUSES = frozenset(
    {
        PreviewStatus.EXECUTED,
        PreviewStatus.DECLINED,
        PreviewStatus.REJECTED,
        PreviewStatus.EXPIRED,
        PreviewStatus.SUPERSEDED,
        PreviewStatus.FAILED,
    }
)
FINAL_OUTCOMES = frozenset(
    {ExecutionOutcome.SUCCEEDED, ExecutionOutcome.REFUSED_BEFORE_EFFECT, ExecutionOutcome.FAILED_AFTER_CHECK}
)


def _state(preview_id: Any) -> tuple[str, str | None] | None:
    row = Preview.objects.filter(pk=preview_id).values_list("status", "execution__outcome").first()
    return (row[0], row[1]) if row is not None else None


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
    previews = Preview.objects.filter(agent_session=session).select_related("execution")
    if statuses:
        previews = previews.filter(status__in=statuses)
    return previews.order_by("-created_at", "-pk")
