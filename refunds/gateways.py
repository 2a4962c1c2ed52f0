"""Payment gateways. Every refund carries the idempotency key `refund:<preview id>`, so a
gateway answers a repeated call with the refund it already made, as real providers do."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from approvals.errors import ExecutionFailure, TransientExecutionError
from approvals.rows import fetch_one, insert_rows

from .models import LocalGatewayRefund


@dataclass(frozen=True)
class GatewayRefund:
    id: str
    amount_minor: int
    currency: str


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


class GatewayMisconfigured(GatewayUnavailable, ImproperlyConfigured):
    """The settings name no usable gateway. Raised at execution, it fails the preview (retryable by
    staff once fixed) instead of crashing the task, which the sweeper would only publish again."""


class PaymentGateway(Protocol):
    def refund(
        self, *, payment_ref: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> GatewayRefund: ...

    def find_refund(
        self, *, payment_ref: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> GatewayRefund | None:
        """The refund made with this idempotency key, if any, without making one."""
        ...


class LocalGateway:
    """A gateway kept in the shop's own database, for the demo and for tests."""

    def refund(
        self, *, payment_ref: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> GatewayRefund:
        # Insert first: a key is nearly always new, and the unique key answers a repeat (or a race): the
        # insert then skips the row (waiting for a racing insert to commit first) and the first is read.
        existing = LocalGatewayRefund(
            idempotency_key=idempotency_key,
            refund_id="lr_" + secrets.token_hex(12),
            payment_ref=payment_ref,
            amount_minor=amount_minor,
            currency=currency,
        )
        if not insert_rows([existing], skip_conflicts=True):
            existing = fetch_one(LocalGatewayRefund, idempotency_key=idempotency_key)
            if existing is None:  # the skipped row clashed on its random refund id instead
                raise TransientExecutionError(f"The local gateway could not store the refund {idempotency_key}.")
        return _checked_local(existing, payment_ref=payment_ref, amount_minor=amount_minor, currency=currency)

    def find_refund(
        self, *, payment_ref: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> GatewayRefund | None:
        existing = fetch_one(LocalGatewayRefund, idempotency_key=idempotency_key)
        if existing is None:
            return None
        return _checked_local(existing, payment_ref=payment_ref, amount_minor=amount_minor, currency=currency)


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
    return GatewayRefund(id=existing.refund_id, amount_minor=existing.amount_minor, currency=existing.currency)


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
