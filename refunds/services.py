"""Write services for orders and refunds."""

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F

from approvals.plugin import (
    ExecutionFailure,
    Preview,
    ProviderEvidence,
    ShopDataInvalid,
    TransientExecutionError,
    amount_of,
    format_minor,
)

from .gateways import GatewayRefund, PaymentGateway, ProviderRemaining, ProviderRemainingExceeded, payment_gateway
from .models import Order, ProviderEvent, Refund, RefundStatus
from .reconciliation import order_reconcile
from .serializers import refunded_beyond_total_problem

ORDER_IMPORT_FIELDS = (
    "currency",
    "total_minor",
    "refunded_minor",
    "status",
    "placed_at",
    "delivered_at",
    "payment_ref",
)


def order_upsert(data: dict[str, Any]) -> str:
    """Create or update one order from import data; the version goes up only on a real change."""
    customer = get_user_model().objects.get(username=data["customer"])
    values = {field: data[field] for field in ORDER_IMPORT_FIELDS}
    order = Order.objects.select_for_update().filter(number=data["id"]).first()
    if order is None:
        Order.objects.create(number=data["id"], customer=customer, **values)
        return "created"
    changed = order.customer_id != customer.pk or any(getattr(order, f) != v for f, v in values.items())
    if not changed:
        return "unchanged"
    # Checked again under the order's lock: a refund may have started since the file was validated.
    problem = refunded_beyond_total_problem(order, values["refunded_minor"], values["total_minor"])
    if problem:
        raise ShopDataInvalid([f"$.orders[{data['id']!r}].refunded_minor: {problem}"])
    for field, value in values.items():
        setattr(order, field, value)
    order.customer = customer
    order.version = F("version") + 1
    order.save()
    return "updated"


def order_record(number: str, lock: bool) -> dict[str, Any] | None:
    """The order as stored, in the import's item format, with its version (the shop data API's GET and
    If-Match); `lock` takes the order's row lock first, as order_upsert does, in the caller's transaction."""
    orders = Order.objects.select_for_update() if lock else Order.objects.all()
    order = orders.filter(number=number).first()
    if order is None:
        return None
    return {
        "id": order.number,
        "customer": get_user_model().objects.values_list("username", flat=True).get(pk=order.customer_id),
        "currency": order.currency,
        "total_minor": order.total_minor,
        "refunded_minor": order.refunded_minor,
        "status": order.status,
        "placed_at": order.placed_at.isoformat(),
        "delivered_at": order.delivered_at.isoformat() if order.delivered_at else None,
        "payment_ref": order.payment_ref,
        "version": order.version,
    }


def refund_pay(*, preview: Preview, order: Order | None = None) -> dict[str, Any]:
    """Ask the gateway for the refund, keyed by the preview: asking again returns the same refund.

    `order` is the order as the executor just checked it under lock (its version is the preview's),
    or None to read it here.
    """
    if order is None:
        order = Order.objects.filter(number=preview.subject_id).first()
        if order is None:
            raise Order.DoesNotExist(f"No order {preview.subject_id}")
    gateway = payment_gateway()
    asked: dict[str, Any] = {
        "payment_ref": order.payment_ref or order.number,
        "amount_minor": amount_of(preview)[0],
        "currency": amount_of(preview)[1],
        "idempotency_key": f"refund:{preview.pk}",
    }
    remaining = gateway.refundable_remaining(payment_ref=asked["payment_ref"], order_total_minor=order.total_minor)
    if remaining.remaining_minor < asked["amount_minor"]:
        # An earlier attempt whose answer was lost may be what the provider counts: then it is this refund.
        made = gateway.find_refund(**asked)
        if made is not None:
            return _effect(made)
        raise _remaining_exceeded(order, remaining, asked, gateway)
    return _effect(gateway.refund(**asked))


def _remaining_exceeded(
    order: Order, remaining: ProviderRemaining, asked: dict[str, Any], gateway: PaymentGateway
) -> ProviderRemainingExceeded:
    """The refusal, with the numbers; the order is reconciled first (outside any transaction: it asks the
    provider), so a drift is on the console's Payments page when staff look."""
    currency = asked["currency"]
    try:
        order_reconcile(order, gateway=gateway)
        compared = "reconciliation has compared the two; the Payments page lists any difference."
    except (TransientExecutionError, ExecutionFailure):
        compared = "the next reconciliation compares the two."  # the refusal stands either way
    return ProviderRemainingExceeded(
        f"The payment provider says {format_minor(remaining.remaining_minor, currency)} "
        f"({remaining.remaining_minor}) remains refundable on {asked['payment_ref']} "
        f"({format_minor(remaining.paid_minor, currency)} ({remaining.paid_minor}) paid, "
        f"{format_minor(remaining.refunded_minor, currency)} ({remaining.refunded_minor}) refunded there), "
        f"less than this refund of {format_minor(asked['amount_minor'], currency)} ({asked['amount_minor']}). "
        f"Nothing was asked. The shop's order says {format_minor(order.remaining_minor, currency)} "
        f"({order.remaining_minor}) remains; {compared}",
        provider_remaining_minor=remaining.remaining_minor,
        provider_paid_minor=remaining.paid_minor,
        provider_refunded_minor=remaining.refunded_minor,
        amount_minor=asked["amount_minor"],
        order_remaining_minor=order.remaining_minor,
    )


def _effect(gateway_refund: GatewayRefund) -> dict[str, Any]:
    """The effect as the provider reported it, stored on the execution: the refund, and where its money is."""
    return {
        "refund_id": gateway_refund.id,
        "amount_minor": gateway_refund.amount_minor,
        "currency": gateway_refund.currency,
        "refund_status": gateway_refund.status,
        "refund_status_reason": gateway_refund.status_reason,
    }


def refund_find(*, preview: Preview) -> dict[str, Any] | None:
    """The refund an earlier attempt made for this preview, asked of the gateway without making one."""
    order = Order.objects.filter(number=preview.subject_id).first()
    if order is None:
        raise Order.DoesNotExist(f"No order {preview.subject_id}")
    gateway_refund = payment_gateway().find_refund(
        payment_ref=order.payment_ref or order.number,
        amount_minor=amount_of(preview)[0],
        currency=amount_of(preview)[1],
        idempotency_key=f"refund:{preview.pk}",
    )
    if gateway_refund is None:
        return None
    return _effect(gateway_refund)


def refund_record(
    *, preview: Preview, order: Order, refund_id: str, status: str = RefundStatus.SUCCEEDED, status_reason: str = ""
) -> dict[str, Any]:
    """Write the refund the provider accepted to the ledger and the order, with the status it reported
    (`pending` is processing at the bank and counts like a paid one until the provider says otherwise).
    Runs under the engine's locks, in its audited transaction."""
    Refund.objects.create(
        order=order,
        preview=preview,
        amount_minor=amount_of(preview)[0],
        currency=amount_of(preview)[1],
        reason=preview.payload["reason"],
        gateway_refund_id=refund_id,
        status=status,
        status_reason=status_reason[:255],
    )
    order.refunded_minor += amount_of(preview)[0]
    order.version += 1
    order.save(update_fields=["refunded_minor", "version", "updated_at"])
    return {
        "refund_id": refund_id,
        "order_id": order.number,
        "amount_minor": preview.amount_minor,
        "currency": preview.currency,
        "order_refunded_minor": order.refunded_minor,
        "refund_status": status,
    }


def refund_evidence(*, preview: Preview) -> ProviderEvidence | None:
    """The payment provider's references to the preview's refund and its events about it, for the
    evidence bundle: the refund's id, the payment it refunds and the idempotency key it was asked with
    (the names of the execution's effect, compared with it), where its money is now, and every event
    the provider sent about it, as received. None before a refund was recorded."""
    refund = Refund.objects.select_related("order").filter(preview=preview).first()
    if refund is None:
        return None
    events = ProviderEvent.objects.filter(object_id=refund.gateway_refund_id).order_by("received_at", "pk")
    return ProviderEvidence(
        references={
            "refund_id": refund.gateway_refund_id,
            "amount_minor": refund.amount_minor,
            "currency": refund.currency,
            "order_id": refund.order.number,
            "payment_ref": refund.order.payment_ref or refund.order.number,
            "idempotency_key": f"refund:{preview.pk}",
            "recorded_at": refund.created_at.isoformat(),
            "status_now": refund.status,
            "status_reason_now": refund.status_reason,
            "status_changed_at": refund.status_changed_at.isoformat() if refund.status_changed_at else None,
        },
        events=[
            {
                "provider": event.provider,
                "event_id": event.event_id,
                "type": event.type,
                "provider_created_at": event.provider_created_at.isoformat() if event.provider_created_at else None,
                "received_at": event.received_at.isoformat(),
                "result": event.result,
                "payload": event.payload,
            }
            for event in events
        ],
    )


def order_describe(data: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """An order as stored, for the import's audit."""
    order = Order.objects.select_related("customer").filter(number=data["id"]).first()
    if order is None:
        return data["id"], None
    summary: dict[str, Any] = {field: getattr(order, field) for field in ORDER_IMPORT_FIELDS}
    summary["placed_at"] = order.placed_at.isoformat()
    summary["delivered_at"] = order.delivered_at.isoformat() if order.delivered_at else None
    return order.number, {"customer": order.customer.get_username(), **summary, "version": order.version}


STAFF_REFUND_PROPOSED = "staff_refund_proposed"


def refund_propose_again(*, refund_pk: int, staff: Any) -> Any:
    """Staff propose a new refund in place of one the bank failed or cancelled: the same order, amount
    and reason, for the same customer, through the engine's one admission path (what remains refundable
    now, the spending limits, the quorum), recorded as `staff`'s re-proposal in the failed preview's
    chain, so `staff` cannot approve it. Nothing is paid until the customer confirms the new preview
    (and another staff member approves it above the threshold). Returns the engine's ProposalOutcome;
    both outcomes are audited with `staff`."""
    from approvals.plugin import PreviewOrigin, audit_record, proposal_admit, registry

    from .models import DEAD_REFUND_STATUSES

    refund = Refund.objects.select_related("order__customer").get(pk=refund_pk)
    if refund.status not in DEAD_REFUND_STATUSES:
        raise ValueError(
            f"Refund {refund.gateway_refund_id} is {refund.status}; only a failed or cancelled one "
            "may be proposed again."
        )
    arguments = {"order_id": refund.order.number, "amount_minor": refund.amount_minor, "reason": refund.reason}
    with transaction.atomic():
        outcome = proposal_admit(
            action=registry.actions["refund_order"],
            arguments=arguments,
            raw_arguments=json.dumps(arguments, sort_keys=True),
            origin=PreviewOrigin.STAFF_REPROPOSAL,
            actor=refund.order.customer,
            proposed_by=staff,
            replaces=refund.preview,
        )
        audit_record(
            event=STAFF_REFUND_PROPOSED,
            preview=outcome.preview,
            actor=staff,
            action="refund_order",
            subject_type="order",
            subject_id=refund.order.number,
            result={
                "replaces_refund": refund.gateway_refund_id,
                "replaces_preview": str(refund.preview_id),
                "outcome": outcome.kind,
                **({"error": outcome.refusal.as_dict()} if outcome.refusal else {}),
            },
        )
    return outcome


def refund_propose_by_staff(*, order_number: str, amount_minor: int, reason: str, staff: Any) -> Any:
    """Staff propose a refund themselves (a customer on the phone): the customer's order, an amount and
    a reason, through the engine's one admission path as for an agent (the policy against the order,
    what remains refundable, the spending limits, the quorum), for the order's customer, recorded as
    `staff`'s proposal (origin `staff_proposal`), so `staff` cannot approve it: the customer confirms
    and, above the threshold, another staff member approves. Raises Order.DoesNotExist for no such
    order. Returns the engine's ProposalOutcome; the admission audits either outcome with `staff` as
    its proposer (`proposed` or `proposal_refused`, origin `staff_proposal`)."""
    from approvals.plugin import PreviewOrigin, proposal_admit, registry

    order = Order.objects.select_related("customer").get(number=order_number)
    arguments = {"order_id": order.number, "amount_minor": amount_minor, "reason": reason}
    with transaction.atomic():  # the admission runs in its caller's transaction
        return proposal_admit(
            action=registry.actions["refund_order"],
            arguments=arguments,
            raw_arguments=json.dumps(arguments, sort_keys=True),
            origin=PreviewOrigin.STAFF_PROPOSAL,
            actor=order.customer,
            proposed_by=staff,
        )
