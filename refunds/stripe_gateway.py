"""Refunds through Stripe (https://docs.stripe.com/api/refunds/create), with the official `stripe` package.

Every refund is created with the Idempotency-Key `refund:<preview id>`, so a retry after a lost answer
gets the refund Stripe already made instead of a second one. The SDK never retries on its own
(`max_network_retries=0`): the Celery task does, with backoff and jitter, and a staff retry from the
console reuses the same key.

Errors are sorted by what they say about the money:

* the outcome is unknown or the provider was busy (no connection, a timeout, a 5xx, 429, 409
  `idempotency_key_in_use`): TransientExecutionError, retried with the same key;
* the provider refused for good (a 400/402/404 such as `charge_already_refunded`, `charge_disputed`,
  `charge_not_refundable`, an over-refund, which Stripe reports as `invalid_request_error` on
  `param=amount`, often without a `code`, or a key reused with other parameters): GatewayDeclined,
  the preview fails at once with the provider's message;
* our credentials were refused (401/403): GatewayUnavailable, the preview fails at once and staff can
  retry it once the configuration is fixed (nothing was done at the provider).

Before each refund the executor reads what remains refundable (`refundable_remaining`): the payment
intent's charges (`GET /v1/charges?payment_intent=…`, every page), each succeeded charge's
`amount_captured` minus its `amount_refunded`. A read changes nothing, so the SDK retries it itself
(`STRIPE_READ_RETRIES`, with its back-off); a read that still fails asks for nothing: a transient error
(retried by the task, as "unavailable", `effect_possible=False`) or GatewayUnavailable.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import stripe
from django.conf import settings

from approvals.plugin import TransientExecutionError

from .gateways import (
    GatewayDeclined,
    GatewayRefund,
    GatewayRefundMismatch,
    GatewayUnavailable,
    ProviderRefund,
    ProviderRemaining,
)

if TYPE_CHECKING:
    from stripe.params import RefundCreateParams

DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_READ_RETRIES = 2
IDEMPOTENCY_KEY_PREFIX = "refund:"
# Refund states in which no money moves and none will (https://docs.stripe.com/api/refunds/object).
DEAD_REFUND_STATUSES = frozenset({"failed", "canceled"})


class StripeGateway:
    """Refunds a PaymentIntent (the order's `payment_ref`, e.g. `pi_…`) through the Stripe API."""

    def __init__(
        self,
        *,
        api_key: str,
        api_base: str = stripe.DEFAULT_API_BASE,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        read_retries: int = DEFAULT_READ_RETRIES,
    ) -> None:
        self.client = _client(api_key, api_base.rstrip("/"), timeout)
        # Reads only: the SDK retries a connection error, a 409 or a 5xx itself, with its back-off.
        self.reading_client = _client(api_key, api_base.rstrip("/"), timeout, read_retries)

    @classmethod
    def from_settings(cls) -> StripeGateway:
        return cls(
            api_key=settings.STRIPE_API_KEY,
            api_base=settings.STRIPE_API_BASE,
            timeout=float(getattr(settings, "STRIPE_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS)),
            read_retries=int(getattr(settings, "STRIPE_READ_RETRIES", DEFAULT_READ_RETRIES)),
        )

    def refundable_remaining(self, *, payment_ref: str, order_total_minor: int) -> ProviderRemaining:
        """The payment intent's succeeded charges, every page: captured minus refunded at Stripe
        (https://docs.stripe.com/api/charges/object). `order_total_minor` is not used: Stripe knows."""
        paid = refunded = 0
        try:
            page = self.reading_client.v1.charges.list(params={"payment_intent": payment_ref, "limit": 100})
            for charge in page.auto_paging_iter():
                data = charge.to_dict()
                if data.get("status") != "succeeded":
                    continue  # a declined attempt captured nothing
                captured = data.get("amount_captured")
                paid += int((data.get("amount") if captured is None else captured) or 0)
                refunded += int(data.get("amount_refunded") or 0)
        except stripe.StripeError as error:
            classified = classify_stripe_error(error)
            if isinstance(classified, TransientExecutionError):
                raise TransientExecutionError(
                    f"Stripe could not be read before the refund; nothing was asked: {classified}",
                    effect_possible=False,
                ) from error
            raise GatewayUnavailable(
                f"Stripe could not tell what remains refundable on {payment_ref}, so nothing was asked: "
                f"{getattr(classified, 'message', classified)}",
                **getattr(classified, "facts", {}),
            ) from error
        return ProviderRemaining(paid_minor=paid, refunded_minor=refunded)

    def refund(self, *, payment_ref: str, amount_minor: int, currency: str, idempotency_key: str) -> GatewayRefund:
        params: RefundCreateParams = {
            "payment_intent": payment_ref,
            "amount": amount_minor,
            "metadata": _metadata(idempotency_key),
        }
        try:
            refund = self.client.v1.refunds.create(params=params, options={"idempotency_key": idempotency_key})
        except stripe.StripeError as error:
            raise classify_stripe_error(error) from error
        return _checked(refund, payment_ref=payment_ref, amount_minor=amount_minor, currency=currency)

    def find_refund(
        self, *, payment_ref: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> GatewayRefund | None:
        """List the PaymentIntent's refunds (every page) and find the one whose metadata carries this
        key. A lookup, never a POST: a replayed POST whose first request never reached Stripe would
        create the refund (https://docs.stripe.com/api/refunds/list)."""
        try:
            page = self.client.v1.refunds.list(params={"payment_intent": payment_ref, "limit": 100})
            for refund in page.auto_paging_iter():
                if (refund.to_dict().get("metadata") or {}).get("idempotency_key") == idempotency_key:
                    return _checked(refund, payment_ref=payment_ref, amount_minor=amount_minor, currency=currency)
        except stripe.StripeError as error:
            classified = classify_stripe_error(error)
            if isinstance(classified, GatewayDeclined):  # e.g. the PaymentIntent is unknown: ask a person
                raise TransientExecutionError(f"Stripe could not list the refunds: {classified.message}") from error
            raise classified from error
        return None

    def list_refunds(self, *, payment_ref: str) -> list[ProviderRefund]:
        """Every refund of the PaymentIntent, all pages, through the SDK (for reconciliation)."""
        try:
            page = self.client.v1.refunds.list(params={"payment_intent": payment_ref, "limit": 100})
            return [provider_refund(refund.to_dict()) for refund in page.auto_paging_iter()]
        except stripe.StripeError as error:
            raise classify_stripe_error(error) from error


def provider_refund(data: dict[str, Any]) -> ProviderRefund:
    """A Stripe refund object as reconciliation and the webhook compare it."""
    metadata = data.get("metadata") or {}
    return ProviderRefund(
        id=str(data.get("id") or ""),
        amount_minor=int(data.get("amount") or 0),
        currency=str(data.get("currency") or "").upper(),
        status=ledger_status(data.get("status")),
        status_reason=status_reason(data),
        payment_ref=str(data.get("payment_intent") or ""),
        idempotency_key=str(metadata.get("idempotency_key") or ""),
    )


@functools.lru_cache(maxsize=8)
def _client(api_key: str, api_base: str, timeout: float, retries: int = 0) -> stripe.StripeClient:
    """One client per configuration, so connections are reused (its HTTP sessions are per thread).
    Writes never retry in the SDK (`retries=0`): Celery retries, with backoff and jitter, and audits each
    attempt; reads may."""
    return stripe.StripeClient(
        api_key,
        base_addresses={"api": api_base},
        max_network_retries=retries,
        http_client=stripe.RequestsClient(timeout=timeout),
    )


def _metadata(idempotency_key: str) -> dict[str, str]:
    metadata = {"idempotency_key": idempotency_key}
    if idempotency_key.startswith(IDEMPOTENCY_KEY_PREFIX):
        metadata["preview_id"] = idempotency_key.removeprefix(IDEMPOTENCY_KEY_PREFIX)
    return metadata


def _checked(refund: Any, *, payment_ref: str, amount_minor: int, currency: str) -> GatewayRefund:
    """The refund Stripe answered with must be the one we asked for; say so loudly if it is not.

    A mismatch means money may have moved in a way the ledger cannot record (say, the order was
    imported with the wrong currency). The preview fails for good with the refund id in its facts,
    so staff can reconcile it by hand; a retry would only get the same refund back.
    """
    data = refund.to_dict()
    refund_id = str(data.get("id") or "")
    if not refund_id:
        raise TransientExecutionError("Stripe answered without a refund id; asking again with the same key.")
    facts = {"provider": "stripe", "refund_id": refund_id, "refund_status": data.get("status")}
    refund_currency = str(data.get("currency") or "").upper()
    if refund_currency != currency.upper():
        raise GatewayRefundMismatch(
            f"Stripe refunded in {refund_currency or 'an unknown currency'} (refund {refund_id}), "
            f"but the order is in {currency.upper()}; the refund needs manual reconciliation.",
            code="gateway_currency_mismatch",
            **facts,
        )
    if data.get("amount") != amount_minor or data.get("payment_intent") not in (None, payment_ref):
        raise GatewayRefundMismatch(
            f"Stripe refunded {data.get('amount')} minor units of {data.get('payment_intent')} (refund {refund_id}) "
            f"instead of {amount_minor} of {payment_ref}; the refund needs manual reconciliation.",
            code="gateway_refund_mismatch",
            **facts,
        )
    if data.get("status") in DEAD_REFUND_STATUSES:
        raise GatewayDeclined(
            f"Stripe did not pay the refund {refund_id}: it is {data.get('status')} "
            f"({data.get('failure_reason') or 'no reason given'}).",
            code="refund_failed",
            **facts,
        )
    return GatewayRefund(
        id=refund_id,
        amount_minor=amount_minor,
        currency=refund_currency,
        status=ledger_status(data.get("status")),
        status_reason=status_reason(data),
    )


def ledger_status(provider_status: Any) -> str:
    """The ledger's status (refunds.models.RefundStatus) for one of Stripe's refund statuses. Stripe's
    `requires_action` is money still on its way, like `pending`; an unknown status is treated as pending
    (counted, never as paid back)."""
    if provider_status in ("succeeded", "failed", "canceled"):
        return str(provider_status)
    return "pending"


def status_reason(data: dict[str, Any]) -> str:
    """Stripe's reason for the status: `failure_reason` of a failed refund, `pending_reason` of a pending one."""
    if data.get("status") in DEAD_REFUND_STATUSES:
        return str(data.get("failure_reason") or "")
    if data.get("status") == "requires_action":
        return "requires_action"
    return str(data.get("pending_reason") or "")


def _error_fields(error: stripe.StripeError) -> dict[str, Any]:
    body = error.json_body if isinstance(error.json_body, dict) else {}
    fields = body.get("error")
    if not isinstance(fields, dict):
        fields = {}
    return {
        "type": fields.get("type") or "",
        "code": fields.get("code") or error.code or "",
        "param": fields.get("param") or getattr(error, "param", None) or "",
        "message": fields.get("message") or error.user_message or "",
    }


def classify_stripe_error(error: stripe.StripeError) -> Exception:
    """The exception that tells the engine what to do about a failed Stripe call."""
    status = error.http_status
    fields = _error_fields(error)
    facts = {
        "provider": "stripe",
        "provider_status": status,
        "provider_type": fields["type"],
        "provider_code": fields["code"],
        "provider_param": fields["param"],
        "provider_request_id": error.request_id or "",
    }
    label = " ".join(part for part in (str(status or ""), fields["type"], fields["code"]) if part)
    if isinstance(error, stripe.APIConnectionError) or status is None:
        # The request may or may not have reached Stripe; only a retry with the same key can tell.
        detail = " ".join(str(error.user_message or error).split())
        detail = detail.partition("(Network error: ")[2].rstrip(")") or detail
        return TransientExecutionError(f"Stripe did not answer: {detail}")
    if status == 429 or isinstance(error, stripe.RateLimitError):
        # Rate limited before the endpoint ran: nothing was made.
        return TransientExecutionError(
            f"Stripe is unavailable for now ({label}): {fields['message']}", effect_possible=False
        )
    if status >= 500 or status == 409:
        return TransientExecutionError(f"Stripe is unavailable for now ({label}): {fields['message']}")
    if isinstance(error, stripe.IdempotencyError) or fields["type"] == "idempotency_error":
        return GatewayDeclined(f"Stripe refused the refund: {fields['message']}", code="idempotency_error", **facts)
    if status in (401, 403):
        return GatewayUnavailable(
            f"Stripe refused our credentials ({label}): {fields['message']} "
            "Fix STRIPE_API_KEY, then retry this preview from the console.",
            **facts,
        )
    code = fields["code"]
    if not code and fields["type"] == "invalid_request_error" and fields["param"] == "amount":
        code = "amount_exceeds_unrefunded"  # Stripe's over-refund error carries no code, only the param
    return GatewayDeclined(
        f"Stripe refused the refund: {fields['message'] or label}", code=code or "gateway_declined", **facts
    )
