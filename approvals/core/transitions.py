"""The one place every preview status change passes through: whoever must hear of transitions (agent
webhooks, approver notifications) registers a listener here instead of patching each service.

Listeners run after the transaction that made the change commits (never for a rolled-back change),
with the preview's id, its previous status and its new status (the same, when an executed preview's
effect changed afterwards: preview_effect_changed). They must be quick and must not fail
the caller: publish a Celery task and return.

A listener registered with `outbox_kind` is one whose message must not be lost (an agent webhook): instead of
a commit callback, the transition writes an outbox row of that kind in its own transaction (payload: the
preview id and both statuses), and the kind's handler (approvals.core.outbox) does the listener's work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)

Listener = Callable[[str, str, str], object]
Interest = Callable[[Any], bool]
_listeners: list[Listener] = []
_interests: dict[Listener, Interest] = {}
_outbox_kinds: dict[Listener, str] = {}


def on_preview_transition(
    listener: Listener, *, interested: Interest | None = None, outbox_kind: str | None = None
) -> Listener:
    """Register `listener(preview_id, previous_status, status)`; usable as a decorator (in an AppConfig.ready).

    `interested(preview)`, asked inside the transaction with the preview as the service holds it, may say
    that the listener has nothing to do for this preview (from what the service read anyway), so that
    no commit callback is queued for it."""
    if listener not in _listeners:
        _listeners.append(listener)
    if interested is not None:
        _interests[listener] = interested
    if outbox_kind is not None:
        _outbox_kinds[listener] = outbox_kind
    return listener


def _listeners_for(preview: Any) -> list[Listener]:
    return [listener for listener in _listeners if _interests.get(listener, _always)(preview)]


def _always(preview: Any) -> bool:
    return True


def preview_transitioned(preview: Any, previous_status: str) -> None:
    """Tell the listeners, once the current transaction commits, that `preview` left `previous_status`
    ("" for a new preview)."""
    if not _listeners or preview.status == previous_status:
        return
    listeners = _listeners_for(preview)
    if listeners:
        _notify_at_commit(listeners, str(preview.pk), previous_status, str(preview.status))


def preview_effect_changed(preview: Any) -> None:
    """Tell the listeners, once the current transaction commits, that a preview whose status stays what
    it is changed otherwise (a refund the bank failed after it was executed, one approval of several). They
    are called with the same previous and new status, so that what they send (an agent webhook's
    envelope) carries the preview's new state: its outcome words and action fields come from the effect."""
    listeners = _listeners_for(preview)
    if listeners:
        _notify_at_commit(listeners, str(preview.pk), str(preview.status), str(preview.status))


def _notify_at_commit(listeners: list[Listener], preview_id: str, previous_status: str, status: str) -> None:
    durable = [listener for listener in listeners if listener in _outbox_kinds]
    if durable:
        from approvals.core.outbox import outbox_write

        payload = {"preview_id": preview_id, "previous_status": previous_status, "status": status}
        for listener in durable:
            outbox_write(_outbox_kinds[listener], payload)
        listeners = [listener for listener in listeners if listener not in _outbox_kinds]
        if not listeners:
            return

    def notify() -> None:
        for listener in listeners:
            try:
                listener(preview_id, previous_status, status)
            except Exception:  # noqa: BLE001 - a listener must never undo or hide the transition
                logger.exception("Preview transition listener %r failed for %s", listener, preview_id)

    notify.is_transition_notice = True  # type: ignore[attr-defined]  # tests tell these callbacks apart
    transaction.on_commit(notify)
