"""The one place every preview status change passes through: whoever must hear of transitions (agent
webhooks, approver notifications) registers a listener here instead of patching each service.

Listeners run after the transaction that made the change commits (never for a rolled-back change),
with the preview's id, its previous status and its new status. They must be quick and must not fail
the caller: publish a Celery task and return.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)

Listener = Callable[[str, str, str], None]
_listeners: list[Listener] = []


def on_preview_transition(listener: Listener) -> Listener:
    """Register `listener(preview_id, previous_status, status)`; usable as a decorator (in an AppConfig.ready)."""
    if listener not in _listeners:
        _listeners.append(listener)
    return listener


def preview_transitioned(preview: Any, previous_status: str) -> None:
    """Tell the listeners, once the current transaction commits, that `preview` left `previous_status`
    ("" for a new preview)."""
    if not _listeners or preview.status == previous_status:
        return
    preview_id, status = str(preview.pk), str(preview.status)

    def notify() -> None:
        for listener in list(_listeners):
            try:
                listener(preview_id, previous_status, status)
            except Exception:  # noqa: BLE001 - a listener must never undo or hide the transition
                logger.exception("Preview transition listener %r failed for %s", listener, preview_id)

    transaction.on_commit(notify)
