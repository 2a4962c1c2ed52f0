"""Reconciliation: the gateway's records against the payment provider's, per order. Reports, never repairs.

For each order it compares the executed refund previews, the ledger (refunds.Refund), the order's
refunded amount and the refunds the provider lists for the order's payment (every page, through the
SDK for Stripe; the local gateway's own table for `local`), and reports:

* `provider_refund_without_preview`: the provider holds a live refund (pending or succeeded) that no
  preview of ours made (a refund from the provider's dashboard, or an unrecorded one);
* `preview_without_provider_refund`: an executed preview whose refund the provider does not list;
* `amount_mismatch`: the provider's amount or currency differs from the ledger's (or the ledger's from
  its preview);
* `status_mismatch`: the provider's status differs from the ledger's (e.g. a `failed` event we missed);
* `refunded_total_mismatch`: the order's refunded amount, the ledger's live total and the provider's
  live total are not all equal.

Refunds our own executions are making right now (their execution is not finished) are left out: they
are not drift yet. Each drift is stored (refunds.Drift) under a fingerprint of what it says, audited
when first found, cleared when a later run no longer finds it, and acknowledged by a person with a note.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.plugin import (
    ApplicationError,
    Execution,
    ExecutionFailure,
    Preview,
    PreviewStatus,
    TransientExecutionError,
    amount_of,
    audit_record,
    digest_of,
    format_minor,
)

from .events import RECORDING_OUTCOMES
from .gateways import PaymentGateway, ProviderRefund, payment_gateway
from .models import DEAD_REFUND_STATUSES, Drift, DriftKind, Order, Refund

logger = logging.getLogger(__name__)

ACTION = "refund_order"
DRIFT_FOUND = "drift_found"
DRIFT_CLEARED = "drift_cleared"
DRIFT_ACKNOWLEDGED = "drift_acknowledged"


@dataclass(frozen=True)
class Finding:
    order: Order
    kind: DriftKind
    reference: str
    message: str
    facts: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        return digest_of(
            {"kind": self.kind.value, "order": self.order.number, "reference": self.reference, "facts": self.facts}
        )


@dataclass
class ReconcileRun:
    orders_checked: int = 0
    drifts: list[Drift] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def unacknowledged(self) -> list[Drift]:
        return [drift for drift in self.drifts if drift.acknowledged_at is None]


def _money(amount: int, currency: str) -> str:
    """`€5.00 (500)`: the amount for people and the number in minor units."""
    try:
        return f"{format_minor(amount, currency)} ({amount})"
    except Exception:  # noqa: BLE001 - a provider's unknown currency code
        return f"{amount} {currency}"


def orders_to_reconcile(*, since: date | None = None) -> list[Order]:
    orders = Order.objects.select_related("customer").order_by("number")
    if since is None:
        return list(orders)
    start = timezone.make_aware(datetime.combine(since, time.min))
    recent_previews = Preview.objects.filter(action=ACTION, created_at__gte=start).values("subject_id")
    return list(
        orders.filter(
            Q(placed_at__gte=since)
            | Q(updated_at__gte=start)
            | Q(refunds__created_at__gte=start)
            | Q(number__in=recent_previews)
        ).distinct()
    )


def _in_flight(preview_ids: set[str]) -> set[str]:
    """Those of these previews whose execution may still record a refund."""
    ids = []
    for value in preview_ids:
        try:
            ids.append(Preview._meta.pk.to_python(value))
        except Exception:  # noqa: BLE001 - metadata written by whoever made the refund
            continue
    rows = Execution.objects.filter(preview_id__in=ids, outcome__in=RECORDING_OUTCOMES).values_list(
        "preview_id", flat=True
    )
    return {str(pk) for pk in rows}


def order_findings(order: Order, provider: list[ProviderRefund]) -> list[Finding]:
    """Every drift on one order, from the database as it is now and the provider's refunds."""
    previews = list(
        Preview.objects.filter(
            action=ACTION, subject_type="order", subject_id=order.number, status=PreviewStatus.EXECUTED
        ).order_by("created_at")
    )
    ledger = list(Refund.objects.filter(order=order).order_by("created_at"))
    by_id = {refund.id: refund for refund in provider}
    ledger_by_id = {row.gateway_refund_id: row for row in ledger}
    ledger_by_preview = {row.preview_id: row for row in ledger}
    in_flight = _in_flight({refund.preview_id for refund in provider if refund.preview_id})
    findings: list[Finding] = []

    def found(kind: DriftKind, reference: str, message: str, **facts: Any) -> None:
        findings.append(Finding(order, kind, reference, message, {"order_id": order.number, **facts}))

    for preview in previews:
        row = ledger_by_preview.get(preview.pk)
        refund_id = row.gateway_refund_id if row else str((preview.result or {}).get("refund_id") or "")
        if refund_id not in by_id:
            found(
                DriftKind.PREVIEW_WITHOUT_PROVIDER_REFUND,
                str(preview.pk),
                f"Order {order.number}: preview {preview.pk} refunded "
                f"{_money(*amount_of(preview))}"
                f" as {refund_id or 'no refund id'}, which the provider does not list.",
                preview_id=str(preview.pk),
                refund_id=refund_id,
                amount_minor=preview.amount_minor,
                currency=preview.currency,
            )
        if row is not None and (row.amount_minor, row.currency) != amount_of(preview):
            found(
                DriftKind.AMOUNT_MISMATCH,
                str(preview.pk),
                f"Order {order.number}: the ledger's refund {row.gateway_refund_id} is "
                f"{_money(row.amount_minor, row.currency)}, its preview "
                f"{_money(*amount_of(preview))}.",
                preview_id=str(preview.pk),
                refund_id=row.gateway_refund_id,
                ledger_amount_minor=row.amount_minor,
                preview_amount_minor=preview.amount_minor,
                currency=row.currency,
            )

    for row in ledger:
        refund = by_id.get(row.gateway_refund_id)
        if refund is None:
            continue  # reported with its preview above
        if (refund.amount_minor, refund.currency) != (row.amount_minor, row.currency):
            found(
                DriftKind.AMOUNT_MISMATCH,
                row.gateway_refund_id,
                f"Order {order.number}: refund {row.gateway_refund_id} is "
                f"{_money(refund.amount_minor, refund.currency)}"
                f" at the provider and {_money(row.amount_minor, row.currency)} in the ledger.",
                refund_id=row.gateway_refund_id,
                ledger_amount_minor=row.amount_minor,
                ledger_currency=row.currency,
                provider_amount_minor=refund.amount_minor,
                provider_currency=refund.currency,
            )
        if refund.status != row.status:
            found(
                DriftKind.STATUS_MISMATCH,
                row.gateway_refund_id,
                f"Order {order.number}: refund {row.gateway_refund_id} ({_money(row.amount_minor, row.currency)}) is "
                f"{refund.status} at the provider and {row.status} in the ledger.",
                refund_id=row.gateway_refund_id,
                ledger_status=row.status,
                provider_status=refund.status,
                amount_minor=row.amount_minor,
                currency=row.currency,
            )

    provider_live = 0
    for refund in provider:
        if refund.preview_id in in_flight:
            continue  # our own execution is making or recording it right now
        live = refund.status not in DEAD_REFUND_STATUSES
        if live and refund.currency == order.currency:
            provider_live += refund.amount_minor
        if refund.id in ledger_by_id or not live:
            continue
        found(
            DriftKind.PROVIDER_REFUND_WITHOUT_PREVIEW,
            refund.id,
            f"Order {order.number}: the provider holds refund {refund.id} of "
            f"{_money(refund.amount_minor, refund.currency)} ({refund.status}) that no preview made.",
            refund_id=refund.id,
            amount_minor=refund.amount_minor,
            currency=refund.currency,
            provider_status=refund.status,
            idempotency_key=refund.idempotency_key,
        )

    ledger_live = sum(row.amount_minor for row in ledger if row.status not in DEAD_REFUND_STATUSES)
    if not order.refunded_minor == ledger_live == provider_live:
        found(
            DriftKind.REFUNDED_TOTAL_MISMATCH,
            "",
            f"Order {order.number}: refunded {_money(order.refunded_minor, order.currency)} on the order, "
            f"{_money(ledger_live, order.currency)} in the ledger, {_money(provider_live, order.currency)} "
            "at the provider.",
            order_refunded_minor=order.refunded_minor,
            ledger_minor=ledger_live,
            provider_minor=provider_live,
            currency=order.currency,
        )
    return findings


def _store(order: Order, findings: list[Finding], now: datetime) -> list[Drift]:
    """Record this order's drifts; clear the ones of an earlier run that are gone."""
    drifts = []
    with transaction.atomic():
        seen = set()
        for finding in findings:
            seen.add(finding.fingerprint)
            drift = Drift.objects.select_for_update().filter(fingerprint=finding.fingerprint).first()
            if drift is None:
                drift = Drift.objects.create(
                    fingerprint=finding.fingerprint,
                    order=order,
                    kind=finding.kind,
                    reference=finding.reference,
                    message=finding.message,
                    facts=finding.facts,
                    last_seen_at=now,
                )
                audit_record(
                    event=DRIFT_FOUND,
                    action=ACTION,
                    subject_type="order",
                    subject_id=order.number,
                    result={"drift": drift.pk, "kind": drift.kind, "message": drift.message, **finding.facts},
                )
            else:
                reopened = drift.cleared_at is not None
                drift.last_seen_at, drift.cleared_at = now, None
                drift.save(update_fields=["last_seen_at", "cleared_at"])
                if reopened:
                    audit_record(
                        event=DRIFT_FOUND,
                        action=ACTION,
                        subject_type="order",
                        subject_id=order.number,
                        result={
                            "drift": drift.pk,
                            "kind": drift.kind,
                            "message": drift.message,
                            "again": True,
                            **finding.facts,
                        },
                    )
            drifts.append(drift)
        gone = (
            Drift.objects.select_for_update().filter(order=order, cleared_at__isnull=True).exclude(fingerprint__in=seen)
        )
        for drift in gone:
            drift.cleared_at = now
            drift.save(update_fields=["cleared_at"])
            audit_record(
                event=DRIFT_CLEARED,
                action=ACTION,
                subject_type="order",
                subject_id=order.number,
                result={"drift": drift.pk, "kind": drift.kind, "message": drift.message},
            )
    return drifts


def reconcile_run(*, since: date | None = None, gateway: PaymentGateway | None = None) -> ReconcileRun:
    """Compare every order (with activity since `since`) with the provider and store what disagrees."""
    gateway = gateway or payment_gateway()
    run = ReconcileRun()
    now = timezone.now()
    for order in orders_to_reconcile(since=since):
        try:
            drifts = order_reconcile(order, gateway=gateway, now=now)
        except (TransientExecutionError, ExecutionFailure) as error:
            run.errors.append(f"order {order.number}: the provider's refunds could not be listed: {error}")
            continue
        run.orders_checked += 1
        run.drifts.extend(drifts)
    return run


def order_reconcile(order: Order, *, gateway: PaymentGateway, now: datetime | None = None) -> list[Drift]:
    """Compare one order with the provider and store what disagrees (what a run does per order; the
    executor runs it when the provider's remainder refused a refund, so staff see why at once)."""
    provider = gateway.list_refunds(payment_ref=order.payment_ref or order.number)
    return _store(order, order_findings(order, provider), now or timezone.now())


def open_drifts() -> list[Drift]:
    return list(
        Drift.objects.filter(cleared_at__isnull=True)
        .select_related("order", "acknowledged_by")
        .order_by("acknowledged_at", "-last_seen_at")
    )


class DriftNotAcknowledged(ApplicationError):
    code = "drift_not_acknowledged"


def drift_acknowledge(*, drift_id: int, person: Any, note: str) -> Drift:
    """A person says they know about this drift (and what they did about it). Audited; repairs nothing."""
    note = note.strip()
    if not note:
        raise DriftNotAcknowledged("Say what you found or did in the note.", code="note_required")
    with transaction.atomic():
        drift = Drift.objects.select_for_update().select_related("order").get(pk=drift_id)
        if drift.acknowledged_at is not None:
            raise DriftNotAcknowledged(
                f"This drift was already acknowledged by {drift.acknowledged_by} on {drift.acknowledged_at:%Y-%m-%d}.",
                code="already_acknowledged",
            )
        drift.acknowledged_at, drift.acknowledged_by, drift.acknowledgement_note = timezone.now(), person, note
        drift.save(update_fields=["acknowledged_at", "acknowledged_by", "acknowledgement_note"])
        audit_record(
            event=DRIFT_ACKNOWLEDGED,
            actor=person,
            action=ACTION,
            subject_type="order",
            subject_id=drift.order.number,
            result={"drift": drift.pk, "kind": drift.kind, "message": drift.message, "note": note, **drift.facts},
        )
    return drift
