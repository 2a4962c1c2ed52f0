"""The outbox: nothing that must leave the gateway lives only in the broker.

A message owed (an agent webhook for a transition, a checkpoint to publish or to have cosigned, an email)
is an OutboxMessage row written in the transaction that causes it. Once that transaction commits, the row's
id is handed to a worker (`approvals.deliver_outbox`, on the queue of its kind); the worker runs the kind's
handler and marks the row delivered. A broker that loses the message (a Redis restart without persistence,
a publish that failed, a worker killed before it acknowledged) loses nothing: the beat's
`approvals.sweep_outbox` hands over again every row still undelivered after OUTBOX_GRACE_SECONDS, taking
them with `SELECT ... FOR UPDATE SKIP LOCKED` so two sweepers never hand over the same row at once.

A message may so be handled twice; every handler is idempotent by the row's `message_id`, which is also the
`webhook-id` (or Message-ID) of what it sends, so a receiver recognises a second copy.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from approvals.models import OutboxMessage
from approvals.operations.publish import DELIVER_OUTBOX, task_publish_to

logger = logging.getLogger(__name__)

SWEEP_BATCH_SIZE = 500
BACKOFF_MAX_SECONDS = 600.0
# A kind of message whose handler is run in-process, rather than by a worker (the task kind's email).
TASK_KIND = "task"

Handler = Callable[[OutboxMessage], None]


class OutboxRetryLater(Exception):
    """Raised by a handler whose message was not taken yet and is to be tried again in `seconds`."""

    def __init__(self, seconds: float, reason: str) -> None:
        super().__init__(reason)
        self.seconds = seconds


@dataclass(frozen=True)
class Kind:
    handler: Handler
    queue: str


_kinds: dict[str, Kind] = {}


def outbox_handler(kind: str, *, queue: str) -> Callable[[Handler], Handler]:
    """Register the handler of a kind of message (a decorator, used where the kind is sent from). It must
    be idempotent by `message.message_id`, and raise when the message was not sent (it is tried again)."""

    def register(handler: Handler) -> Handler:
        _kinds[kind] = Kind(handler=handler, queue=queue)
        return handler

    return register


def outbox_write(kind: str, payload: dict[str, Any], *, message_id: str | None = None) -> OutboxMessage | None:
    """Record a message owed, in the current transaction, and hand it to a worker once that commits.
    With `message_id`, a message already recorded under it is not recorded again (None)."""
    fields: dict[str, Any] = {"kind": kind, "payload": payload}
    if message_id is not None:
        fields["message_id"] = message_id
        try:
            with transaction.atomic():
                message = OutboxMessage.objects.create(**fields)
        except IntegrityError:
            return None
    else:
        message = OutboxMessage.objects.create(**fields)
    pk = message.pk

    def dispatch() -> None:
        outbox_dispatch(pk, kind)

    dispatch.is_outbox_dispatch = True  # type: ignore[attr-defined]  # tests tell these callbacks apart
    transaction.on_commit(dispatch, robust=True)
    return message


def outbox_task(name: str, *args: Any) -> OutboxMessage | None:
    """Run the Celery task registered as `name` with `args` (JSON values) once the current transaction
    commits, surviving a broker that loses it: the task's own queue, through the outbox."""
    return outbox_write(TASK_KIND, {"task": name, "args": list(args)})


def _queue(kind: str, payload: dict[str, Any] | None = None) -> str:
    if kind == TASK_KIND and payload is not None:
        route = settings.CELERY_TASK_ROUTES.get(str(payload.get("task")), {})
        return str(route.get("queue", settings.CELERY_TASK_DEFAULT_QUEUE))
    registered = _kinds.get(kind)
    return registered.queue if registered is not None else settings.CELERY_TASK_DEFAULT_QUEUE


def outbox_dispatch(pk: int, kind: str, payload: dict[str, Any] | None = None) -> None:
    """Hand a recorded message to a worker. A broker that is down is logged: the sweeper hands it over."""
    if settings.CELERY_TASK_ALWAYS_EAGER:  # the demo's and the tests' in-process runs
        outbox_deliver(pk)
        return
    if kind == TASK_KIND and payload is None:
        payload = OutboxMessage.objects.filter(pk=pk).values_list("payload", flat=True).first()
    try:
        task_publish_to(DELIVER_OUTBOX, _queue(kind, payload), pk)
    except Exception:  # noqa: BLE001 - whatever the broker raises, the row stays and the sweeper sends it
        logger.warning("Could not queue outbox message %s (%s); the sweeper will", pk, kind, exc_info=True)


def _backoff(attempts: int) -> float:
    base = float(settings.OUTBOX_GRACE_SECONDS)
    return random.uniform(base / 2, min(BACKOFF_MAX_SECONDS, base * 2 ** max(0, attempts - 1)))


def outbox_deliver(pk: int) -> bool:
    """Run the handler of one message still owed and mark it delivered (once, whoever runs it). False when
    it was delivered already or the handler failed (recorded, tried again after a backoff)."""
    message = OutboxMessage.objects.filter(pk=pk, delivered_at__isnull=True).first()
    if message is None:
        return False
    undelivered = OutboxMessage.objects.filter(pk=pk, delivered_at__isnull=True)
    try:
        if message.kind == TASK_KIND:
            _run_task(message)
        else:
            registered = _kinds.get(message.kind)
            if registered is None:
                raise LookupError(f"no handler for outbox messages of kind {message.kind!r}")
            registered.handler(message)
    except Exception as error:  # noqa: BLE001 - recorded on the row; the sweeper tries again
        logger.warning("Outbox message %s (%s) not delivered: %s", message.message_id, message.kind, error)
        wait = error.seconds if isinstance(error, OutboxRetryLater) else _backoff(message.attempts + 1)
        undelivered.update(
            attempts=F("attempts") + 1,
            next_attempt_at=timezone.now() + timedelta(seconds=wait),
            last_error=str(error)[:500],
        )
        return False
    return bool(undelivered.update(delivered_at=timezone.now(), attempts=F("attempts") + 1))


def _run_task(message: OutboxMessage) -> None:
    from celery import current_app

    name = str(message.payload["task"])
    current_app.tasks[name](*message.payload.get("args", []), outbox_message_id=message.message_id)


def outbox_sweep(now: Any = None) -> int:
    """Hand over again what is still owed after the grace period (its first hand-over was lost, or its
    last attempt's backoff ran out). Returns how many."""
    now = now or timezone.now()
    due_before = now - timedelta(seconds=float(settings.OUTBOX_GRACE_SECONDS))
    with transaction.atomic():
        due = list(
            OutboxMessage.objects.select_for_update(skip_locked=True)
            .filter(delivered_at__isnull=True, next_attempt_at__lte=due_before)
            .order_by("next_attempt_at")
            .values_list("pk", "kind", "payload")[:SWEEP_BATCH_SIZE]
        )
        # Not handed over again by the next sweep before another grace period (this one may still run).
        OutboxMessage.objects.filter(pk__in=[pk for pk, _, _ in due]).update(next_attempt_at=now)
    for pk, kind, payload in due:
        outbox_dispatch(pk, kind, payload)
    return len(due)


def outbox_undelivered() -> int:
    """How many messages are owed (for /readyz and the chaos campaign's settle check)."""
    return OutboxMessage.objects.filter(delivered_at__isnull=True).count()
