"""Provider events: what the payment provider says happened to a refund after it answered.

Stripe's webhook (refunds.webhooks) and the local gateway (local_refund_status_set) hand their events
to `provider_event_take`, which stores the event under its id first (a unique constraint: a second
delivery changes nothing), applies it to the ledger and audits it, all in one transaction.

What an event can change (docs/payments.md):

* a refund `pending` at the bank becomes `succeeded`, `failed` or `canceled`; a `succeeded` one can
  still fail (some payment methods). `failed` and `canceled` are final.
* a refund that failed or was cancelled moved no money: its ledger row is marked, the order's refunded
  amount goes back down (its version goes up), the customer is emailed, the agent hears of it through
  the preview transition listeners (approvals.plugin.preview_effect_changed) and the console shows
  it. Nothing is retried: a person may propose a new refund.
* anything else (a move back from a final status, a refund nobody here made) changes nothing; it is
  stored, audited, and reconciliation reports what disagrees.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.plugin import Execution, ExecutionOutcome, Preview, audit_record, preview_effect_changed

from .models import (
    DEAD_REFUND_STATUSES,
    REFUND_STATUS_MOVES,
    LocalGatewayRefund,
    Order,
    ProviderEvent,
    Refund,
    RefundStatus,
)
from .stripe_gateway import ledger_status, status_reason

STRIPE = "stripe"
LOCAL = "local"
REFUND_EVENT_TYPES = frozenset({"refund.created", "refund.updated", "refund.failed"})
CHARGE_REFUNDED = "charge.refunded"
# Audit events of this module (the audit log takes any short name).
EVENT_RECEIVED = "provider_event"
EVENT_REPEATED = "provider_event_repeated"
# An execution in one of these may still record the refund an event is about.
RECORDING_OUTCOMES = (
    ExecutionOutcome.PENDING,
    ExecutionOutcome.IN_PROGRESS,
    ExecutionOutcome.EFFECT_UNKNOWN,
    ExecutionOutcome.EFFECT_UNRECORDED,
)


class RefundNotRecordedYet(Exception):
    """The event is about a refund our own execution made and has not recorded yet (the provider's
    event overtook the provider's answer). Nothing is stored: the provider delivers it again later."""


@dataclass
class EventOutcome:
    result: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def duplicate(self) -> bool:
        return self.result == "duplicate"


def provider_event_take(*, provider: str, event: dict[str, Any]) -> EventOutcome:
    """Store, apply and audit one verified event, once. Raises RefundNotRecordedYet (nothing stored)."""
    event_id = str(event.get("id") or "")[:255]
    event_type = str(event.get("type") or "")[:64]
    obj = (event.get("data") or {}).get("object") or {}
    created = event.get("created")
    with transaction.atomic():
        try:
            with transaction.atomic():
                row = ProviderEvent.objects.create(
                    provider=provider,
                    event_id=event_id,
                    type=event_type,
                    object_id=str(obj.get("id") or "")[:255],
                    provider_created_at=datetime.fromtimestamp(created, tz=UTC) if isinstance(created, int) else None,
                    payload=event,
                )
        except IntegrityError:
            # Delivered before (or by a delivery running now, which this insert waited for).
            first = ProviderEvent.objects.filter(provider=provider, event_id=event_id).first()
            audit_record(
                event=EVENT_REPEATED,
                subject_type="provider_event",
                subject_id=event_id[:64],
                result={
                    "provider": provider,
                    "event_id": event_id,
                    "type": event_type,
                    "first_result": first.result if first else "",
                },
            )
            return EventOutcome("duplicate", {"first_result": first.result if first else ""})

        refunds: list[Refund] = []
        if event_type in REFUND_EVENT_TYPES:
            outcome, refund = _refund_object_apply(obj)
            refunds = [refund] if refund else []
        elif event_type == CHARGE_REFUNDED:
            outcome, refunds = _charge_refunded_apply(obj)
        else:
            outcome = EventOutcome("ignored_type", {})
        row.result, row.detail = outcome.result, outcome.detail
        row.save(update_fields=["result", "detail"])
        subject = refunds[0].order.number if refunds else str(obj.get("payment_intent") or obj.get("id") or "")
        audit_record(
            event=EVENT_RECEIVED,
            preview=refunds[0].preview if len(refunds) == 1 else None,
            action="refund_order",
            subject_type="order" if refunds else "payment",
            subject_id=subject[:64],
            result={
                "provider": provider,
                "event_id": event_id,
                "type": event_type,
                "result": outcome.result,
                **outcome.detail,
            },
        )
    return outcome


def _refund_object_apply(obj: dict[str, Any]) -> tuple[EventOutcome, Refund | None]:
    refund_id = str(obj.get("id") or "")
    status, reason = ledger_status(obj.get("status")), status_reason(obj)
    facts: dict[str, Any] = {
        "refund_id": refund_id,
        "provider_status": obj.get("status"),
        "status_reason": reason,
        "provider_amount_minor": obj.get("amount"),
        "provider_currency": str(obj.get("currency") or "").upper(),
    }
    ledger = Refund.objects.filter(gateway_refund_id=refund_id).values_list("order_id", flat=True)
    order_id = ledger.first()
    if order_id is None:
        _raise_if_ours_in_flight(obj)
        order_id = ledger.first()  # our execution may have recorded it between the two reads
    if order_id is None:
        return EventOutcome("unmatched", facts), None
    # The order first, then its refund: the executor inserts refunds while holding the order's lock.
    order = Order.objects.select_for_update().get(pk=order_id)
    refund = Refund.objects.select_for_update(of=("self",)).select_related("preview").get(gateway_refund_id=refund_id)
    refund.order = order
    facts.update(
        order_id=order.number,
        amount_minor=refund.amount_minor,
        currency=refund.currency,
        status_before=refund.status,
        status=status,
    )
    if status == refund.status:
        if reason and reason != refund.status_reason:
            refund.status_reason = reason[:255]
            refund.save(update_fields=["status_reason"])
        return EventOutcome("unchanged", facts), refund
    if status not in REFUND_STATUS_MOVES[RefundStatus(refund.status)]:
        facts["status"] = refund.status  # kept: a final status never changes back
        return EventOutcome("out_of_order", facts), refund
    refund.status, refund.status_reason, refund.status_changed_at = status, reason[:255], timezone.now()
    refund.save(update_fields=["status", "status_reason", "status_changed_at"])
    if status in DEAD_REFUND_STATUSES:
        before = order.refunded_minor
        # The money never left: what remains refundable on the order grows back.
        order.refunded_minor = max(order.refunded_minor - refund.amount_minor, 0)
        order.version += 1
        order.save(update_fields=["refunded_minor", "version", "updated_at"])
        facts.update(order_refunded_minor_before=before, order_refunded_minor=order.refunded_minor)
        from .tasks import refund_status_notify

        refund_pk = refund.pk
        transaction.on_commit(lambda: refund_status_notify.delay(refund_pk), robust=True)
    preview_effect_changed(refund.preview)
    return EventOutcome(f"refund_{status}", facts), refund


def _raise_if_ours_in_flight(obj: dict[str, Any]) -> None:
    """An event about a refund one of our executions made and may still record is too early."""
    key = str((obj.get("metadata") or {}).get("idempotency_key") or "")
    if not key.startswith("refund:"):
        return
    execution = Execution.objects.filter(preview_id=_uuid_or_none(key.removeprefix("refund:"))).first()
    if execution is not None and execution.outcome in RECORDING_OUTCOMES:
        raise RefundNotRecordedYet(f"The refund {obj.get('id')} is not recorded yet (execution {execution.outcome}).")


def _uuid_or_none(value: str) -> Any:
    try:
        return Preview._meta.pk.to_python(value)
    except Exception:  # noqa: BLE001 - metadata is the provider's, not ours to trust
        return None


def _charge_refunded_apply(obj: dict[str, Any]) -> tuple[EventOutcome, list[Refund]]:
    """A charge's refunds, when the event carries them (older API versions expand `refunds`)."""
    listed = ((obj.get("refunds") or {}).get("data")) or []
    results, refunds = [], []
    for item in listed:
        outcome, refund = _refund_object_apply(item)
        results.append({"refund_id": item.get("id"), "result": outcome.result})
        if refund is not None:
            refunds.append(refund)
    facts = {"charge": obj.get("id"), "amount_refunded": obj.get("amount_refunded"), "refunds": results}
    return EventOutcome("applied" if results else "noted", facts), refunds


# The local gateway's equivalent of Stripe's events --------------------------------------------------


def local_refund_status_set(*, refund_id: str, status: str, reason: str = "") -> EventOutcome:
    """Move a refund of the local gateway to `status` (as the bank would) and deliver the event Stripe
    would send, through the same `provider_event_take`. For the demo (`manage.py local_refund_event`)
    and the tests."""
    if status not in RefundStatus.values:
        raise ValueError(f"Unknown refund status {status!r}; use one of {', '.join(RefundStatus.values)}.")
    with transaction.atomic():
        row = LocalGatewayRefund.objects.select_for_update().get(refund_id=refund_id)
        row.status, row.status_reason = status, reason[:255]
        row.save(update_fields=["status", "status_reason"])
        event_type = "refund.failed" if status == RefundStatus.FAILED else "refund.updated"
        event = local_refund_event(row, event_type=event_type)
        return provider_event_take(provider=LOCAL, event=event)


def local_refund_event(row: LocalGatewayRefund, *, event_type: str) -> dict[str, Any]:
    """An event shaped like Stripe's (https://docs.stripe.com/api/events/object) for a local refund."""
    refund = {
        "id": row.refund_id,
        "object": "refund",
        "amount": row.amount_minor,
        "currency": row.currency.lower(),
        "payment_intent": row.payment_ref,
        "metadata": {"idempotency_key": row.idempotency_key},
        "status": row.status,
        ("failure_reason" if row.status in DEAD_REFUND_STATUSES else "pending_reason"): row.status_reason or None,
    }
    return {
        "id": "evt_local_" + secrets.token_hex(12),
        "object": "event",
        "type": event_type,
        "created": int(timezone.now().timestamp()),
        "data": {"object": refund},
    }
