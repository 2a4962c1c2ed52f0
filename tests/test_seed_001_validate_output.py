"""Seed 001, "Validate structured model output": four calls that all satisfy the schema; one is safe.

Every rule reads data the model never saw (the stored order), and each refusal states the rule and
the number so that a model can correct itself.
"""

import datetime

import pytest

from approvals.core.errors import PolicyRefusal
from approvals.models import AuditRecord, Preview
from refunds.models import Order, OrderStatus, Refund
from refunds.policy import refund_policy_check, refund_policy_checks
from tests.conftest import propose
from tests.factories import OrderFactory

FIRST = {"order_id": "ORD-4417", "amount_minor": 2499, "reason": "damaged"}
SECOND = {"order_id": "ORD-4417", "amount_minor": 24990, "reason": "damaged"}
THIRD = {"order_id": "ORD-9999", "amount_minor": 2499, "reason": "late"}
FOURTH = {"order_id": "ORD-4417", "amount_minor": 0, "reason": "unwanted"}


def refusal_of(**kwargs) -> PolicyRefusal:
    with pytest.raises(PolicyRefusal) as caught:
        refund_policy_check(**kwargs)
    return caught.value


# The four calls through the agent API --------------------------------------------------------


def test_the_first_call_passes(alice_agent, ord4417):
    response = propose(alice_agent, **FIRST)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["preview"]["order_id"] == "ORD-4417"
    assert body["preview"]["amount_minor"] == 2499
    assert body["preview"]["currency"] == "EUR"
    assert body["executed"] is False
    preview = Preview.objects.get()
    assert (preview.subject_id, preview.amount_minor, preview.payload["reason"]) == ("ORD-4417", 2499, "damaged")


def test_the_second_call_exceeds_what_remains(alice_agent, ord4417):
    response = propose(alice_agent, **SECOND)

    assert response.status_code == 422, response.content
    assert response.json() == {
        "ok": False,
        "executed": False,
        "error": {
            "code": "amount_exceeds_remaining",
            "message": "Refund of €249.90 (24990) exceeds the €24.99 (2499) remaining on ORD-4417",
            "remaining_minor": 2499,
        },
    }
    assert Preview.objects.count() == 0
    record = AuditRecord.objects.get(event="proposal_refused")
    assert record.subject_id == "ORD-4417"
    assert record.result["error"]["remaining_minor"] == 2499


def test_the_third_call_is_refused_for_identity_before_its_reason(alice_agent, ord4417):
    response = propose(alice_agent, **THIRD)

    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "order_unavailable"
    assert "ORD-9999" in error["message"]
    assert "late" not in error["message"]
    assert "delivery_days" not in error
    assert Preview.objects.count() == 0


def test_the_fourth_call_is_a_no_op_and_refused(alice_agent, ord4417):
    response = propose(alice_agent, **FOURTH)

    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "zero_amount"
    assert "0" in error["message"]
    assert "ORD-4417" in error["message"]
    assert Preview.objects.count() == 0


def test_only_the_first_of_the_four_passes(alice_agent, ord4417):
    answers = [propose(alice_agent, **arguments) for arguments in (FIRST, SECOND, THIRD, FOURTH)]

    assert [a.status_code for a in answers] == [201, 422, 422, 422]
    assert [a.json().get("error", {}).get("code") for a in answers] == [
        None,
        "amount_exceeds_remaining",
        "order_unavailable",
        "zero_amount",
    ]
    assert Preview.objects.count() == 1
    assert Refund.objects.count() == 0
    ord4417.refresh_from_db()
    assert (ord4417.refunded_minor, ord4417.version) == (0, 1)
    # Every call is audited, with its arguments as received.
    records = AuditRecord.objects.filter(event__in=["proposed", "proposal_refused"]).order_by("id")
    assert [r.event for r in records] == ["proposed", "proposal_refused", "proposal_refused", "proposal_refused"]
    assert [r.result.get("error", {}).get("code") for r in records[1:]] == [
        "amount_exceeds_remaining",
        "order_unavailable",
        "zero_amount",
    ]


def test_the_remaining_amount_accounts_for_earlier_refunds(alice_agent, ord4417):
    Order.objects.filter(pk=ord4417.pk).update(refunded_minor=2000)

    response = propose(alice_agent, order_id="ORD-4417", amount_minor=500, reason="damaged")

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["remaining_minor"] == 499
    assert error["message"] == "Refund of €5.00 (500) exceeds the €4.99 (499) remaining on ORD-4417"
    assert propose(alice_agent, order_id="ORD-4417", amount_minor=499, reason="damaged").status_code == 201


# `late` at the boundary ----------------------------------------------------------------------


def late_order(alice, days: int) -> Order:
    placed = datetime.date(2026, 8, 2)
    return OrderFactory(
        number=f"LATE-{days}",
        customer=alice,
        total_minor=2499,
        placed_at=placed,
        delivered_at=placed + datetime.timedelta(days=days),
    )


def test_late_at_exactly_seven_days_is_refused_with_the_number(alice_agent, alice):
    late_order(alice, 7)

    response = propose(alice_agent, order_id="LATE-7", amount_minor=100, reason="late")

    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "reason_not_applicable"
    assert error["delivery_days"] == 7
    assert "delivered 7 days" in error["message"]
    assert "more than 7 days" in error["message"]
    assert Preview.objects.count() == 0


def test_late_on_the_seed_order_states_its_two_days(alice_agent, ord4417):
    response = propose(alice_agent, order_id="ORD-4417", amount_minor=100, reason="late")

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "reason_not_applicable"
    assert error["delivery_days"] == 2
    assert "delivered 2 days" in error["message"]


def test_late_at_eight_days_is_allowed(alice_agent, alice):
    late_order(alice, 8)

    response = propose(alice_agent, order_id="LATE-8", amount_minor=100, reason="late")

    assert response.status_code == 201, response.content
    assert response.json()["preview"]["reason"] == "late"
    assert Preview.objects.get().subject_id == "LATE-8"


# The policy order, first failure wins --------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "delivered_at"),
    [(OrderStatus.PENDING, None), (OrderStatus.SHIPPED, None), (OrderStatus.CANCELLED, None)],
)
def test_an_undelivered_order_is_not_refundable_before_anything_else(alice_agent, alice, status, delivered_at):
    OrderFactory(number="ORD-1", customer=alice, status=status, delivered_at=delivered_at, total_minor=2499)

    # Zero, too much, and `late` without a delivery date: the order's state is named first.
    for amount, reason in ((0, "unwanted"), (99999, "damaged"), (100, "late")):
        response = propose(alice_agent, order_id="ORD-1", amount_minor=amount, reason=reason)
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["code"] == "order_not_refundable"
        assert status in error["message"]
    assert Preview.objects.count() == 0


def test_a_foreign_undelivered_order_is_unavailable_not_unrefundable(alice_agent, bob):
    OrderFactory(number="ORD-2", customer=bob, status=OrderStatus.PENDING, delivered_at=None)

    response = propose(alice_agent, order_id="ORD-2", amount_minor=0, reason="late")

    assert response.json()["error"]["code"] == "order_unavailable"
    assert "pending" not in response.content.decode()


def test_zero_is_named_before_a_late_reason_that_does_not_hold(alice_agent, ord4417):
    response = propose(alice_agent, order_id="ORD-4417", amount_minor=0, reason="late")
    assert response.json()["error"]["code"] == "zero_amount"


def test_too_much_is_named_before_a_late_reason_that_does_not_hold(alice_agent, ord4417):
    response = propose(alice_agent, order_id="ORD-4417", amount_minor=2500, reason="late")
    error = response.json()["error"]
    assert error["code"] == "amount_exceeds_remaining"
    assert error["remaining_minor"] == 2499


def test_the_whole_remaining_amount_is_allowed(alice_agent, ord4417):
    assert propose(alice_agent, order_id="ORD-4417", amount_minor=2499, reason="unwanted").status_code == 201


# The policy as plain functions ---------------------------------------------------------------


def seed_order(**overrides) -> Order:
    values = {
        "number": "ORD-4417",
        "currency": "EUR",
        "total_minor": 2499,
        "refunded_minor": 0,
        "status": OrderStatus.DELIVERED,
        "placed_at": datetime.date(2026, 8, 2),
        "delivered_at": datetime.date(2026, 8, 4),
    }
    values.update(overrides)
    return Order(**values)  # unsaved: the policy needs no database


def test_policy_function_allows_the_first_call():
    assert refund_policy_check(order=seed_order(), amount_minor=2499, reason="damaged") is None


def test_policy_function_refuses_the_second_call_with_remaining():
    refusal = refusal_of(order=seed_order(), amount_minor=24990, reason="damaged")
    assert refusal.code == "amount_exceeds_remaining"
    assert refusal.facts == {"remaining_minor": 2499}
    assert refusal.message == "Refund of €249.90 (24990) exceeds the €24.99 (2499) remaining on ORD-4417"
    assert refusal.as_dict() == {
        "code": "amount_exceeds_remaining",
        "message": "Refund of €249.90 (24990) exceeds the €24.99 (2499) remaining on ORD-4417",
        "remaining_minor": 2499,
    }


def test_policy_function_refuses_the_fourth_call_as_a_no_op():
    assert refusal_of(order=seed_order(), amount_minor=0, reason="unwanted").code == "zero_amount"


@pytest.mark.parametrize(("days", "allowed"), [(0, False), (2, False), (7, False), (8, True), (30, True)])
def test_policy_function_late_boundary(days, allowed):
    order = seed_order(delivered_at=datetime.date(2026, 8, 2) + datetime.timedelta(days=days))
    if allowed:
        assert refund_policy_check(order=order, amount_minor=1, reason="late") is None
    else:
        refusal = refusal_of(order=order, amount_minor=1, reason="late")
        assert refusal.code == "reason_not_applicable"
        assert refusal.facts == {"delivery_days": days}
        assert f"delivered {days} days" in refusal.message


@pytest.mark.parametrize("reason", ["damaged", "unwanted"])
def test_policy_function_other_reasons_ignore_the_dates(reason):
    order = seed_order(delivered_at=datetime.date(2026, 8, 2))
    assert refund_policy_check(order=order, amount_minor=1, reason=reason) is None


def test_policy_function_not_refundable_comes_first():
    order = seed_order(status=OrderStatus.SHIPPED, delivered_at=None)
    refusal = refusal_of(order=order, amount_minor=0, reason="late")
    assert refusal.code == "order_not_refundable"
    assert refusal.facts == {"order_status": "shipped"}


def test_policy_function_fully_refunded_order_has_nothing_remaining():
    refusal = refusal_of(order=seed_order(refunded_minor=2499), amount_minor=1, reason="damaged")
    assert refusal.code == "amount_exceeds_remaining"
    assert refusal.facts == {"remaining_minor": 0}
    assert refusal.message == "Refund of €0.01 (1) exceeds the €0.00 (0) remaining on ORD-4417"


def test_policy_checks_report_every_rule_in_order():
    checks = refund_policy_checks(order=seed_order(), amount_minor=24990, reason="late")
    assert [check.rule for check, _ in checks] == [
        "order_refundable",
        "amount_not_zero",
        "amount_within_remaining",
        "reason_applies",
    ]
    assert [check.passed for check, _ in checks] == [True, True, False, False]
    assert [refusal.code if refusal else None for _, refusal in checks] == [
        None,
        None,
        "amount_exceeds_remaining",
        "reason_not_applicable",
    ]
    # The first failure wins.
    assert refusal_of(order=seed_order(), amount_minor=24990, reason="late").code == "amount_exceeds_remaining"
