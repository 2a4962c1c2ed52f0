"""`refund_order`, plugged into the approvals engine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef
from django.urls import reverse

from approvals.plugin import (
    Action,
    ApprovalRole,
    CounterField,
    DisplayRow,
    FactTable,
    Link,
    PolicyRefusal,
    Preview,
    PreviewStatus,
    Proposal,
    ProviderEvidence,
    RiskFlag,
    RuleResult,
    amount_in_flight,
    amount_in_flight_column,
    amount_of,
    customer_named,
    decimals_words,
    example_major,
    format_minor,
    parse_major,
)

from .gateways import GatewayUnavailable
from .models import DEAD_REFUND_STATUSES, Order, Refund, RefundStatus
from .permissions import REVIEW_REFUNDS, STAFF_ROLES, may_see_payments
from .policy import ORDER_UNAVAILABLE_MESSAGE, RefundRefusal, refund_policy_check, refund_policy_checks
from .serializers import RefundOrderArguments
from .services import refund_evidence, refund_find, refund_pay, refund_record

CATCH_ALL = "*"
REASON_WORDS = {"damaged": "Arrived damaged", "late": "Delivered late", "unwanted": "No longer wanted"}
RULE_WORDS = {
    "order_refundable": "2. Order is refundable (delivered, not cancelled)",
    "amount_not_zero": "3. Amount is not zero",
    "amount_within_remaining": "4. Amount is within what remains refundable",
    "reason_applies": "5. The reason applies",
}


def _in_flight(order: Order, *, exclude: Any = None) -> int:
    """What refunds being paid right now take from the order (they may already be at the provider)."""
    return amount_in_flight(subject_type=RefundOrderAction.subject_type, subject_id=order.number, exclude=exclude)


def staff_review_threshold(currency: str) -> int | None:
    """The amount above which a refund in this currency needs staff, or None: then every refund does."""
    thresholds = settings.STAFF_REVIEW_THRESHOLDS
    return thresholds.get(currency, thresholds.get(CATCH_ALL))


def staff_review_required(amount_minor: int, currency: str) -> bool:
    # Fails closed: a currency nobody set a threshold for (and no catch-all) always goes to staff.
    threshold = staff_review_threshold(currency)
    return threshold is None or amount_minor > threshold


class RefundOrderAction(Action):
    name = "refund_order"
    subject_argument = "order_id"
    description = (
        "Propose a partial or full refund of one of the signed-in customer's orders. "
        "Amounts are integers in the minor unit of the order's currency; the currency is "
        "always the order's own. This only creates a preview: nothing is refunded until the "
        "customer confirms it (and staff approve it, above a threshold). Report the status "
        "this tool returns, not your own conclusion."
    )
    arguments_serializer = RefundOrderArguments
    subject_model = Order
    subject_type = "order"
    subject_id_field = "number"
    subject_owner_field = "customer"
    subject_unavailable_code = RefundRefusal.ORDER_UNAVAILABLE
    subject_unavailable_message = ORDER_UNAVAILABLE_MESSAGE
    proposes_amount = True
    effect_performer = "the payment provider"
    review_permission = REVIEW_REFUNDS
    staff_roles = STAFF_ROLES
    # The payment gateway is not configured (or not reachable as configured): a staff retry may mend it.
    retryable_failure_codes = frozenset({GatewayUnavailable.code})

    def subject_changed_words(self, preview: Preview) -> str:
        return (
            "Your order changed after this request was made (for example, another refund on it was completed), "
            "so what it shows may no longer be right. Nothing was done. Ask the assistant for a new request: "
            "it will use your order as it is now."
        )

    def customer_home(self, user: Any) -> Link:
        return Link("My orders", reverse("refunds:orders"))

    def console_links(self, user: Any) -> list[Link]:
        if not may_see_payments(user):
            return []
        return [Link("Payments", reverse("payments_console:reconciliation"), key="payments")]

    def may_use(self, user: Any) -> bool:
        return bool(user.is_active)

    def proposal_subject_columns(self, subject_id: Any) -> dict[str, tuple[str, Sequence[Any]]]:
        # What refunds being paid right now take from the order, read with it.
        return {"in_flight_minor": amount_in_flight_column(subject_type=self.subject_type, subject_id=str(subject_id))}

    def propose(self, *, actor: Any, arguments: dict[str, Any]) -> Proposal:
        order = self.proposal_subject(actor=actor, subject_id=arguments["order_id"])
        refund_policy_check(
            order=order,
            amount_minor=arguments["amount_minor"],
            reason=arguments["reason"],
            in_flight_minor=int(order.in_flight_minor),
        )
        required = [ApprovalRole.CUSTOMER.value]
        if staff_review_required(arguments["amount_minor"], order.currency):
            required.append(ApprovalRole.STAFF.value)
        return Proposal(
            subject_type=self.subject_type,
            subject_id=order.number,
            subject_version=order.version,
            payload={
                "order_id": order.number,
                "amount_minor": arguments["amount_minor"],
                "currency": order.currency,
                "reason": arguments["reason"],
            },
            amount_minor=arguments["amount_minor"],
            currency=order.currency,
            required_approvals=required,
        )

    def revalidate(self, *, preview: Preview, subject: Any) -> None:
        order: Order = subject
        if order.currency != preview.currency:
            raise PolicyRefusal(
                f"Order {order.number} is in {order.currency}, the preview in {preview.currency}.",
                code=RefundRefusal.CURRENCY_MISMATCH,
            )
        refund_policy_check(
            order=order,
            amount_minor=amount_of(preview)[0],
            reason=preview.payload["reason"],
            in_flight_minor=_in_flight(order, exclude=preview.pk),
        )

    def perform(self, *, preview: Preview, subject: Any = None) -> dict[str, Any]:
        return refund_pay(preview=preview, order=subject)

    def effect_reference(self, effect: dict[str, Any] | None) -> str:
        if effect and effect.get("refund_id"):
            return f"reference {effect['refund_id']}"
        return "no reference"

    def provider_evidence(self, preview: Preview) -> ProviderEvidence | None:
        return refund_evidence(preview=preview)

    can_look_up_effect = True

    def find_effect(self, *, preview: Preview) -> dict[str, Any] | None:
        return refund_find(preview=preview)

    def record(self, *, preview: Preview, subject: Any, effect: dict[str, Any]) -> dict[str, Any]:
        return refund_record(
            preview=preview,
            order=subject,
            refund_id=effect["refund_id"],
            # An effect stored before refunds had a status (effect_unrecorded) was a paid refund.
            status=effect.get("refund_status") or RefundStatus.SUCCEEDED,
            status_reason=effect.get("refund_status_reason") or "",
        )

    def headline(self, preview: Preview) -> str:
        return f"Refund {format_minor(*amount_of(preview))} on order {preview.subject_id}"

    def display_rows(self, preview: Preview) -> list[DisplayRow]:
        reason = preview.payload["reason"]
        return [
            DisplayRow("Order", preview.subject_id),
            DisplayRow("Refund amount", format_minor(*amount_of(preview))),
            DisplayRow("Currency", amount_of(preview)[1]),
            DisplayRow("Reason", REASON_WORDS.get(reason, reason)),
        ]

    def consequence(self, preview: Preview) -> str:
        return (
            f"{format_minor(*amount_of(preview))} goes back to the payment method "
            f"used for order {preview.subject_id}. A refund cannot be undone once it is made."
        )

    def preview_fields(self, preview: Preview) -> dict[str, Any]:
        fields = {
            "order_id": preview.payload["order_id"],
            "amount_minor": preview.amount_minor,
            "currency": preview.currency,
            "reason": preview.payload["reason"],
        }
        refund = self._refund(preview)
        if refund is not None:
            # Where the money is, as the provider last reported it: pending (processing at the bank),
            # succeeded, failed or canceled (no money moved).
            fields["refund"] = {
                "id": refund.gateway_refund_id,
                "status": refund.status,
                "status_reason": refund.status_reason,
            }
        return fields

    def _refund(self, preview: Preview) -> Refund | None:
        """The ledger row of an executed preview: where its money is now, as the provider last said."""
        if preview.status != PreviewStatus.EXECUTED:
            return None
        cached = preview._state.fields_cache.get("refund")
        return cached if cached is not None else Refund.objects.filter(preview_id=preview.pk).first()

    def outcome_text(self, preview: Preview) -> str:
        refund = self._refund(preview)
        refund_id = refund.gateway_refund_id if refund else (preview.result or {}).get("refund_id", "")
        amount = format_minor(*amount_of(preview))
        status = refund.status if refund else RefundStatus.SUCCEEDED
        reason = f" ({refund.status_reason})" if refund and refund.status_reason else ""
        if status == RefundStatus.PENDING:
            return (
                f"Refund of {amount} on order {preview.subject_id} accepted by the payment provider and processing "
                f"at the bank (refund reference {refund_id}){reason}. It is not in the customer's account yet; "
                "it counts as refunded unless the bank fails it."
            )
        if status in DEAD_REFUND_STATUSES:
            what = "was cancelled" if status == RefundStatus.CANCELED else "failed at the bank"
            return (
                f"The refund of {amount} on order {preview.subject_id} (refund reference {refund_id}) {what}{reason}: "
                f"no money was returned, and {amount} is refundable on the order again. It will not be retried "
                "automatically; our staff can propose a new refund."
            )
        return f"Refunded {amount} on order {preview.subject_id} (refund reference {refund_id})."

    def outcome_title(self, preview: Preview) -> str | None:
        refund = self._refund(preview)
        if refund is None or refund.status == RefundStatus.SUCCEEDED:
            return None
        return refund.get_status_display()

    # Spending limits: a refund is money going out; one the bank failed or cancelled moved none.
    counts_toward_spending_limits = True

    def spending_reversed(self) -> Any:
        return Refund.objects.filter(status__in=DEAD_REFUND_STATUSES).values("preview_id")

    # Staff review: verified facts from the database, never from the agent's arguments.

    def _order(self, preview: Preview) -> Order | None:
        return Order.objects.select_related("customer").filter(number=preview.subject_id).first()

    def review_summary(self, preview: Preview) -> str:
        reason = preview.payload["reason"]
        return (
            f"Refund {format_minor(*amount_of(preview))} on {preview.subject_id} "
            f"for {customer_named(preview.actor.get_username())}, {reason}"
        )

    def review_facts(self, preview: Preview) -> list[DisplayRow]:
        order = self._order(preview)
        if order is None:
            return [DisplayRow("Order", f"{preview.subject_id} no longer exists")]
        money = order.currency
        customer = order.customer
        days = order.delivery_days
        # Once executed, the order's refunded amount already includes this refund.
        recorded = preview.status == PreviewStatus.EXECUTED
        after = order.remaining_minor if recorded else order.remaining_minor - amount_of(preview)[0]
        return [
            DisplayRow("Order", order.number),
            DisplayRow("Customer", f"{customer.get_username()} ({customer.email or 'no email'})"),
            DisplayRow("Order status", order.get_status_display()),
            DisplayRow("Placed", f"{order.placed_at:%-d %b %Y}"),
            DisplayRow("Delivered", f"{order.delivered_at:%-d %b %Y}" if order.delivered_at else "Not delivered"),
            DisplayRow("Delivery took", "Not delivered" if days is None else f"{days} day{'s' if days != 1 else ''}"),
            DisplayRow("Order total", format_minor(order.total_minor, money)),
            DisplayRow("Already refunded", format_minor(order.refunded_minor, money)),
            DisplayRow("Remaining refundable", format_minor(order.remaining_minor, money)),
            DisplayRow(
                "Remaining after this refund" + (" (made)" if recorded else ""),
                format_minor(after, money) if after >= 0 else f"{format_minor(-after, money)} too much",
            ),
            DisplayRow("Payment reference", order.payment_ref or "none"),
            DisplayRow("Order version", f"{order.version} now, {preview.subject_version} when proposed"),
        ]

    def policy_evaluation(self, preview: Preview) -> list[RuleResult]:
        order = self._order(preview)
        if order is None:
            return [RuleResult("1. Order exists", False, f"There is no order {preview.subject_id}.")]
        owner = order.customer.get_username()
        results = [
            RuleResult(
                "1. Order belongs to the customer",
                order.customer_id == preview.actor_id,
                f"{order.number} belongs to {owner}; the refund is for {preview.actor.get_username()}.",
            ),
        ]
        for check, _refusal in refund_policy_checks(
            order=order,
            amount_minor=amount_of(preview)[0],
            reason=preview.payload["reason"],
            in_flight_minor=_in_flight(order, exclude=preview.pk),
        ):
            detail = check.detail
            if check.rule == "amount_within_remaining":
                detail += (
                    f" That is {format_minor(amount_of(preview)[0], order.currency)} of "
                    f"{format_minor(order.remaining_minor, order.currency)}."
                )
            results.append(RuleResult(RULE_WORDS.get(check.rule, check.rule), check.passed, detail))
        results.append(
            RuleResult(
                "Currency is the order's",
                order.currency == preview.currency,
                f"Order in {order.currency}, preview in {preview.currency}.",
            )
        )
        results.append(
            RuleResult(
                "Order unchanged since the preview",
                order.version == preview.subject_version,
                f"Version {order.version} now, {preview.subject_version} when proposed.",
            )
        )
        return results

    def review_tables(self, preview: Preview) -> list[FactTable]:
        refunds = Refund.objects.filter(order__number=preview.subject_id).order_by("created_at")
        rows = [
            [
                f"{refund.created_at:%-d %b %Y %H:%M}",
                format_minor(refund.amount_minor, refund.currency),
                REASON_WORDS.get(refund.reason, refund.reason),
                refund.gateway_refund_id,
                refund.get_status_display() + (f" ({refund.status_reason})" if refund.status_reason else ""),
                "this preview" if refund.preview_id == preview.pk else str(refund.preview_id),
            ]
            for refund in refunds
        ]
        return [
            FactTable(
                caption=f"Refunds already made on {preview.subject_id} (ledger)",
                columns=["Date", "Amount", "Reason", "Gateway reference", "Status at the provider", "Preview"],
                rows=rows,
                empty="No refunds have been made on this order.",
            )
        ]

    history_noun = "refunds"

    def customer_history(self, preview: Preview) -> Any:
        """The customer's refunds paid before, on any of their orders; one the bank failed or cancelled
        afterwards is not among them (its money came back)."""
        return (
            Preview.objects.filter(action=self.name, actor_id=preview.actor_id, status=PreviewStatus.EXECUTED)
            .exclude(pk=preview.pk)
            .exclude(pk__in=self.spending_reversed())
        )

    def risk_flags_many(self, previews: list[Preview]) -> dict[Any, list[RiskFlag]]:
        customers = {p.actor_id for p in previews}
        # Whether each customer has a refund at all: EXISTS stops at the first, so the page costs the
        # same however many refunds its customers had (all their rows were read before).
        refunded_before = set(
            get_user_model()
            .objects.filter(pk__in=customers)
            .filter(Exists(Refund.objects.filter(order__customer_id=OuterRef("pk"))))
            .values_list("pk", flat=True)
        )
        flags: dict[Any, list[RiskFlag]] = {}
        for preview in previews:
            found = []
            if preview.actor_id not in refunded_before:
                found.append(RiskFlag("first_refund", "First refund of this customer"))
            amount, currency = amount_of(preview)
            threshold = staff_review_threshold(currency)
            if threshold is None:  # the row's only reason for staff, often: it must say so, not "none"
                found.append(
                    RiskFlag("no_threshold", f"No staff threshold for {currency}: every {currency} refund is reviewed")
                )
            elif amount > threshold:
                found.append(RiskFlag("above_threshold", f"Above the {format_minor(threshold, currency)} threshold"))
            flags[preview.pk] = found
        return flags

    def counter_fields(self, preview: Preview) -> list[CounterField]:
        amount, currency = amount_of(preview)
        return [
            CounterField(
                name="amount",
                label=f"Refund amount ({currency})",
                current=format_minor(amount, currency),
                hint=(
                    f"In {currency}, with {decimals_words(currency)}, e.g. {example_major(currency)}. "
                    "The same refund rules apply."
                ),
            )
        ]

    def counter_arguments(self, preview: Preview, values: dict[str, str]) -> dict[str, Any]:
        try:
            amount_minor = parse_major(values.get("amount", ""), amount_of(preview)[1])
        except ValueError as error:
            raise PolicyRefusal(
                f"The amount is not usable: {error}.", code=RefundRefusal.COUNTER_AMOUNT_INVALID
            ) from error
        return {"order_id": preview.subject_id, "amount_minor": amount_minor, "reason": preview.payload["reason"]}

    def counter_words(self, preview: Preview, arguments: dict[str, Any]) -> str:
        amount, currency = amount_of(preview)
        return (
            f"a refund of {format_minor(arguments['amount_minor'], currency)} on order {preview.subject_id} "
            f"instead of {format_minor(amount, currency)}"
        )

    def customer_facts(self, preview: Preview) -> list[DisplayRow]:
        order = Order.objects.filter(number=preview.subject_id).first()
        if order is None:
            return []
        money = order.currency
        rows = [DisplayRow("Order total", format_minor(order.total_minor, money))]
        if preview.status == PreviewStatus.EXECUTED:  # this refund is in the books already
            rows += [
                DisplayRow("Refunded so far", format_minor(order.refunded_minor, money)),
                DisplayRow("Left to refund now", format_minor(order.remaining_minor, money)),
            ]
        elif preview.is_open:
            rows += [
                DisplayRow("Refunded before", format_minor(order.refunded_minor, money)),
                DisplayRow(
                    "Left to refund after this",
                    format_minor(max(order.remaining_minor - amount_of(preview)[0], 0), money),
                ),
            ]
        else:  # not carried out: what stands now
            rows += [
                DisplayRow("Refunded so far", format_minor(order.refunded_minor, money)),
                DisplayRow("Left to refund", format_minor(order.remaining_minor, money)),
            ]
        return rows
