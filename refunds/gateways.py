"""Payment gateways. Every refund carries the idempotency key `refund:<preview id>`, so a
gateway answers a repeated call with the refund it already made, as real providers do."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from approvals.plugin import ExecutionFailure, TransientExecutionError

from .models import LocalGatewayRefund


@dataclass(frozen=True)
class GatewayRefund:
    id: str
    amount_minor: int
    currency: str
    status: str = "succeeded"  # refunds.models.RefundStatus: pending until the bank has paid it
    status_reason: str = ""


@dataclass(frozen=True)
class ProviderRefund:
    """A refund as the provider lists it (reconciliation compares these with the ledger)."""

    id: str
    amount_minor: int
    currency: str
    status: str
    status_reason: str
    payment_ref: str
    idempotency_key: str

    @property
    def preview_id(self) -> str:
        return self.idempotency_key.removeprefix("refund:") if self.idempotency_key.startswith("refund:") else ""


@dataclass(frozen=True)
class ProviderRemaining:
    """What the provider says of a payment before a refund: paid (captured) and already refunded there
    (live refunds: pending or succeeded), in minor units."""

    paid_minor: int
    refunded_minor: int

    @property
    def remaining_minor(self) -> int:
        return max(self.paid_minor - self.refunded_minor, 0)


class GatewayDeclined(ExecutionFailure):
    """The provider refused the refund for good (e.g. already refunded); do not retry."""

    code = "gateway_declined"


class GatewayUnavailable(ExecutionFailure):
    """The provider cannot be used as configured (e.g. it refused our API key). Nothing was done
    there, so staff may retry the preview from the console once the configuration is fixed."""

    code = "gateway_unavailable"
    before_effect = True


class GatewayRefundMismatch(ExecutionFailure):
    """The provider made a refund, but not the one asked for (another amount or currency): money
    moved in a way the ledger cannot record. The refund's facts go to staff; nothing is retried."""

    code = "gateway_refund_mismatch"
    effect_made = True


class ProviderRemainingExceeded(GatewayDeclined):
    """The provider says less remains refundable on the payment than the refund: nothing was asked
    (a refund made outside the gateway, which reconciliation reports). The preview fails for good."""

    code = "provider_remaining_exceeded"


class GatewayMisconfigured(GatewayUnavailable, ImproperlyConfigured):
    """The settings name no usable gateway. Raised at execution, it fails the preview (retryable by
    staff once fixed) instead of crashing the task, which the sweeper would only publish again."""


class PaymentGateway(Protocol):
    def refund(self, *, payment_ref: str, amount_minor: int, currency: str, idempotency_key: str) -> GatewayRefund: ...

    def find_refund(
        self, *, payment_ref: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> GatewayRefund | None:
        """The refund made with this idempotency key, if any, without making one."""
        ...

    def list_refunds(self, *, payment_ref: str) -> list[ProviderRefund]:
        """Every refund the provider holds for this payment (every page), made here or elsewhere."""
        ...

    def refundable_remaining(self, *, payment_ref: str, order_total_minor: int) -> ProviderRemaining:
        """What the provider says was paid and is refunded already on this payment, read before every
        refund. A provider that cannot be read raises TransientExecutionError (effect_possible=False:
        nothing was asked) or GatewayUnavailable. `order_total_minor` is what a gateway that keeps no
        record of payments (the local one) takes as paid."""
        ...


class LocalGateway:
    """A gateway kept in the shop's own database, for the demo and for tests."""

    def refund(self, *, payment_ref: str, amount_minor: int, currency: str, idempotency_key: str) -> GatewayRefund:
        # Insert first: the unique key answers a repeat (or a race): the insert then skips the row (waiting
        # for a racing insert to commit first), and what is stored under the key, ours or the first, is read.
        LocalGatewayRefund.objects.bulk_create(
            [
                LocalGatewayRefund(
                    idempotency_key=idempotency_key,
                    refund_id="lr_" + secrets.token_hex(12),
                    payment_ref=payment_ref,
                    amount_minor=amount_minor,
                    currency=currency,
                    status=settings.LOCAL_GATEWAY_REFUND_STATUS,
                )
            ],
            ignore_conflicts=True,
        )
        stored = LocalGatewayRefund.objects.filter(idempotency_key=idempotency_key).first()
        if stored is None:  # the skipped row clashed on its random refund id instead
            raise TransientExecutionError(f"The local gateway could not store the refund {idempotency_key}.")
        return _checked_local(stored, payment_ref=payment_ref, amount_minor=amount_minor, currency=currency)

    def find_refund(
        self, *, payment_ref: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> GatewayRefund | None:
        existing = LocalGatewayRefund.objects.filter(idempotency_key=idempotency_key).first()
        if existing is None:
            return None
        return _checked_local(existing, payment_ref=payment_ref, amount_minor=amount_minor, currency=currency)

    def list_refunds(self, *, payment_ref: str) -> list[ProviderRefund]:
        return [
            ProviderRefund(
                id=row.refund_id,
                amount_minor=row.amount_minor,
                currency=row.currency,
                status=row.status,
                status_reason=row.status_reason,
                payment_ref=row.payment_ref,
                idempotency_key=row.idempotency_key,
            )
            for row in LocalGatewayRefund.objects.filter(payment_ref=payment_ref).order_by("created_at", "pk")
        ]

    def refundable_remaining(self, *, payment_ref: str, order_total_minor: int) -> ProviderRemaining:
        """The local gateway keeps refunds, not payments: the order's total is what was paid, and its own
        live refunds of the payment (pending or succeeded) what is refunded."""
        live = LocalGatewayRefund.objects.filter(payment_ref=payment_ref).exclude(status__in=("failed", "canceled"))
        return ProviderRemaining(
            paid_minor=order_total_minor, refunded_minor=sum(live.values_list("amount_minor", flat=True))
        )


def _checked_local(
    existing: LocalGatewayRefund, *, payment_ref: str, amount_minor: int, currency: str
) -> GatewayRefund:
    if (existing.payment_ref, existing.amount_minor, existing.currency) != (payment_ref, amount_minor, currency):
        raise GatewayRefundMismatch(
            f"The idempotency key {existing.idempotency_key} was used for a different refund "
            f"({existing.refund_id}: {existing.amount_minor} {existing.currency} of {existing.payment_ref}).",
            code="idempotency_error",
            refund_id=existing.refund_id,
        )
    if existing.status in ("failed", "canceled"):
        raise GatewayDeclined(
            f"The local gateway did not pay the refund {existing.refund_id}: it is {existing.status}.",
            code="refund_failed",
            refund_id=existing.refund_id,
        )
    return GatewayRefund(
        id=existing.refund_id,
        amount_minor=existing.amount_minor,
        currency=existing.currency,
        status=existing.status,
        status_reason=existing.status_reason,
    )


def payment_gateway() -> PaymentGateway:
    if settings.PAYMENT_GATEWAY == "local":
        return LocalGateway()
    if settings.PAYMENT_GATEWAY == "stripe":
        if not settings.STRIPE_API_KEY:
            raise GatewayMisconfigured(
                "PAYMENT_GATEWAY='stripe' needs STRIPE_API_KEY. Set it, then retry this preview from the console."
            )
        from .stripe_gateway import StripeGateway

        return StripeGateway.from_settings()
    raise GatewayMisconfigured(
        f"PAYMENT_GATEWAY={settings.PAYMENT_GATEWAY!r} is not supported; use 'local' or 'stripe'."
    )
