"""Property tests (hypothesis) of the refund policy: for any order and any proposal.

Rules, in order, first failure wins (DESIGN.md): refundable (delivered), amount not zero,
amount within what remains, `late` needs delivery more than 7 days after the order was placed.
The oracle below states them independently of refunds/policy.py; the policy must agree with it,
its refusals must carry facts that match the numbers in their message, and no proposal through
the real API may yield a preview in another currency or above what remains.
"""

import itertools
import re
from datetime import date, timedelta

import pytest
from django.conf import settings as django_settings
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from approvals.core.arguments import MAX_SAFE_MINOR
from approvals.core.errors import PolicyRefusal
from approvals.core.money import format_minor
from approvals.models import Preview
from refunds.models import Order, OrderStatus
from refunds.policy import RefundReason, refund_policy_check, refund_policy_checks
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory, UserFactory

CURRENCIES = ["EUR", "USD", "JPY", "KWD", "GBP", "CHF", "BHD", "CLP"]
RULE_ORDER = ["order_refundable", "amount_not_zero", "amount_within_remaining", "reason_applies"]

AMOUNTS = st.one_of(
    st.integers(min_value=0, max_value=2**53),
    st.sampled_from([0, 1, 2**53 - 1, 2**53]),
)
REASONS = st.sampled_from(RefundReason.ALL)


@st.composite
def orders(draw, max_total=MAX_SAFE_MINOR):
    """Any order the shop could hold (the model's constraints), unsaved."""
    total = draw(st.one_of(st.integers(min_value=0, max_value=max_total), st.sampled_from([0, 1, max_total])))
    refunded = draw(st.one_of(st.integers(min_value=0, max_value=total), st.sampled_from([0, total])))
    status = draw(st.one_of(st.just(OrderStatus.DELIVERED), st.sampled_from(OrderStatus.values)))
    placed = draw(st.dates(min_value=date(2000, 1, 1), max_value=date(2099, 12, 31)))
    days = draw(st.one_of(st.integers(min_value=0, max_value=60), st.sampled_from([7, 8])))
    if status == OrderStatus.DELIVERED:
        delivered = placed + timedelta(days=days)
    elif status == OrderStatus.CANCELLED:
        delivered = draw(st.sampled_from([None, placed + timedelta(days=days)]))
    else:
        delivered = None
    return Order(
        number=draw(st.from_regex(r"\A[A-Za-z]{1,4}-[0-9]{1,6}\Z")),
        currency=draw(st.sampled_from(CURRENCIES)),
        total_minor=total,
        refunded_minor=refunded,
        status=status,
        placed_at=placed,
        delivered_at=delivered,
    )


@st.composite
def proposals(draw):
    """An order and a proposal on it: any amount up to 2**53, often near what remains."""
    order = draw(orders())
    remaining = order.total_minor - order.refunded_minor
    amount = draw(
        st.one_of(
            AMOUNTS,
            st.integers(min_value=0, max_value=remaining),
            st.sampled_from([remaining, remaining + 1, 1]),
        )
    )
    return order, amount, draw(REASONS)


@st.composite
def likely_allowed(draw):
    """Proposals that pass more often than chance: delivered, something left, an amount within it."""
    order = draw(orders().filter(lambda o: o.status == OrderStatus.DELIVERED and o.total_minor > o.refunded_minor))
    amount = draw(st.integers(min_value=1, max_value=order.total_minor - order.refunded_minor))
    return order, amount, draw(REASONS)


def expected_refusal(order: Order, amount: int, reason: str) -> str | None:
    """The policy, stated independently: the code of the first rule that fails, or None."""
    if order.status != "delivered":
        return "order_not_refundable"
    if amount == 0:
        return "zero_amount"
    if amount > order.total_minor - order.refunded_minor:
        return "amount_exceeds_remaining"
    if reason == "late" and (order.delivered_at - order.placed_at).days <= 7:
        return "reason_not_applicable"
    return None


def decide(order: Order, amount: int, reason: str) -> PolicyRefusal | None:
    try:
        refund_policy_check(order=order, amount_minor=amount, reason=reason)
    except PolicyRefusal as refusal:
        return refusal
    return None


def numbers_in(message: str, order: Order) -> list[int]:
    """The integers a message states, leaving out the digits of the order number."""
    return [int(n) for n in re.findall(r"\d+", message.replace(order.number, " "))]


PURE = settings(max_examples=600, deadline=None)


@PURE
@given(proposal=proposals())
@example(
    proposal=(
        Order(
            number="o-12",
            currency="EUR",
            total_minor=1000,
            refunded_minor=0,
            status="delivered",
            placed_at=date(2026, 8, 2),
            delivered_at=date(2026, 8, 4),
        ),
        1000,
        "damaged",
    )
)
@example(
    proposal=(
        Order(
            number="o-12",
            currency="EUR",
            total_minor=1000,
            refunded_minor=0,
            status="delivered",
            placed_at=date(2026, 8, 2),
            delivered_at=date(2026, 8, 4),
        ),
        1001,
        "damaged",
    )
)
@example(
    proposal=(
        Order(
            number="ORD-4417",
            currency="EUR",
            total_minor=2499,
            refunded_minor=0,
            status="delivered",
            placed_at=date(2026, 8, 2),
            delivered_at=date(2026, 8, 10),
        ),
        1,
        "late",
    )
)
@example(
    proposal=(
        Order(
            number="ORD-4417",
            currency="EUR",
            total_minor=2499,
            refunded_minor=0,
            status="delivered",
            placed_at=date(2026, 8, 2),
            delivered_at=date(2026, 8, 9),
        ),
        1,
        "late",
    )
)
def test_the_policy_agrees_with_the_rules_in_their_order(proposal):
    order, amount, reason = proposal
    refusal = decide(order, amount, reason)

    assert (refusal.code if refusal else None) == expected_refusal(order, amount, reason)


@PURE
@given(proposal=st.one_of(proposals(), likely_allowed()))
def test_an_allowed_refund_never_exceeds_what_remains(proposal):
    order, amount, reason = proposal
    allowed = decide(order, amount, reason) is None
    event("allowed" if allowed else "refused")
    if not allowed:
        return

    assert order.status == OrderStatus.DELIVERED
    assert 0 < amount <= order.total_minor - order.refunded_minor
    assert order.refunded_minor + amount <= order.total_minor
    if reason == RefundReason.LATE:
        assert (order.delivered_at - order.placed_at).days > 7


@PURE
@given(proposal=proposals())
def test_the_first_failing_rule_is_the_one_reported(proposal):
    order, amount, reason = proposal
    checks = refund_policy_checks(order=order, amount_minor=amount, reason=reason)

    assert [check.rule for check, _ in checks] == RULE_ORDER
    for check, refusal in checks:
        assert check.passed is (refusal is None)
    failing = [refusal for _, refusal in checks if refusal is not None]
    refusal = decide(order, amount, reason)
    if failing:
        assert refusal is not None
        assert (refusal.code, refusal.message, refusal.facts) == (failing[0].code, failing[0].message, failing[0].facts)
    else:
        assert refusal is None


@PURE
@given(proposal=proposals())
def test_a_refusals_facts_match_the_numbers_in_its_message(proposal):
    order, amount, reason = proposal
    refusal = decide(order, amount, reason)
    assume(refusal is not None)
    facts = refusal.facts
    numbers = numbers_in(refusal.message, order)

    assert order.number in refusal.message
    for value in facts.values():  # facts are plain JSON values: integers, not floats or Decimals
        assert value is None or type(value) in (int, str)
    if refusal.code == "order_not_refundable":
        assert facts == {"order_status": order.status}
        assert order.status in refusal.message
        assert numbers == []
    elif refusal.code == "zero_amount":
        assert facts == {}
        assert numbers == [0, 1]  # "a refund of 0 ... at least 1"
        assert order.currency in refusal.message
    elif refusal.code == "amount_exceeds_remaining":
        remaining = order.total_minor - order.refunded_minor
        assert facts == {"remaining_minor": remaining}
        # Each amount as a person reads it and in the minor units the tool takes: "€24.99 (2499)".
        assert [int(n) for n in re.findall(r"\((\d+)\)", refusal.message)] == [amount, remaining]
        for value in (amount, remaining):
            assert f"{format_minor(value, order.currency)} ({value})" in refusal.message
    elif refusal.code == "reason_not_applicable":
        days = (order.delivered_at - order.placed_at).days
        assert facts == {"delivery_days": days}
        assert numbers == [7, days]
    else:
        pytest.fail(f"unexpected refusal {refusal.code}")


@PURE
@given(proposal=proposals())
def test_the_policy_reads_the_order_and_changes_nothing(proposal):
    order, amount, reason = proposal
    before = {f.attname: getattr(order, f.attname) for f in Order._meta.concrete_fields}

    decide(order, amount, reason)
    refund_policy_checks(order=order, amount_minor=amount, reason=reason)

    assert {f.attname: getattr(order, f.attname) for f in Order._meta.concrete_fields} == before


# Through the real API ---------------------------------------------------------------------------

_numbers = itertools.count()


@pytest.fixture
def customer(db):
    user = UserFactory(username="prop")
    return user, agent_client_for(user)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(proposal=st.one_of(proposals(), likely_allowed()))
@example(
    proposal=(
        Order(
            number="o-12",
            currency="JPY",
            total_minor=500,
            refunded_minor=0,
            status="delivered",
            placed_at=date(2026, 8, 2),
            delivered_at=date(2026, 8, 4),
        ),
        500,
        "damaged",
    )
)
@example(
    proposal=(
        Order(
            number="o-12",
            currency="KWD",
            total_minor=2**53 - 1,
            refunded_minor=0,
            status="delivered",
            placed_at=date(2026, 8, 2),
            delivered_at=date(2026, 8, 4),
        ),
        2**53 - 1,
        "unwanted",
    )
)
def test_no_proposal_through_the_api_yields_a_preview_in_another_currency_or_above_what_remains(customer, proposal):
    order, amount, reason = proposal
    user, client = customer
    stored = OrderFactory(
        number=f"P-{next(_numbers)}",
        customer=user,
        currency=order.currency,
        total_minor=order.total_minor,
        refunded_minor=order.refunded_minor,
        status=order.status,
        placed_at=order.placed_at,
        delivered_at=order.delivered_at,
    )
    previews = Preview.objects.count()

    response = propose(client, order_id=stored.number, amount_minor=amount, reason=reason)

    event(f"HTTP {response.status_code}")
    body = response.json()
    assert body["executed"] is False
    if amount > MAX_SAFE_MINOR:
        assert response.status_code == 400  # beyond what every JSON reader holds exactly: malformed
        assert Preview.objects.count() == previews
        return
    refusal = expected_refusal(stored, amount, reason)
    if refusal is not None:
        assert response.status_code == 422, body
        assert body["error"]["code"] == refusal
        assert Preview.objects.count() == previews
        return
    assert response.status_code == 201, body
    preview = Preview.objects.get(pk=body["preview"]["id"])
    stored.refresh_from_db()
    for currency, amount_minor in [
        (preview.currency, preview.amount_minor),
        (body["preview"]["currency"], body["preview"]["amount_minor"]),
        (preview.payload["currency"], preview.payload["amount_minor"]),
    ]:
        assert currency == stored.currency
        assert amount_minor == amount
        assert amount_minor <= stored.total_minor - stored.refunded_minor
    assert preview.subject_id == stored.number
    assert preview.subject_version == stored.version
    thresholds = django_settings.STAFF_REVIEW_THRESHOLDS
    threshold = thresholds.get(stored.currency, thresholds.get("*"))
    staff = threshold is None or amount > threshold
    assert body["preview"]["required_approvals"] == (["customer", "staff"] if staff else ["customer"])
    assert stored.refunded_minor == order.refunded_minor  # a proposal moves no money
