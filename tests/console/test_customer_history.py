"""The detail page shows the customer's earlier refunds across their orders: count, totals per currency
and a list linking to each preview; another customer's refunds and ones the bank undid are not there."""

from refunds.models import Refund, RefundStatus
from tests.factories import OrderFactory, UserFactory

from .conftest import confirmed, proposed
from .test_detail import section


def executed(customer, order_number, amount_minor, capture):
    with capture(execute=True):
        preview = confirmed(proposed(customer, order_number, amount_minor))
    preview.refresh_from_db()
    assert preview.status == "executed", preview.status
    return preview


def test_the_customers_earlier_refunds_across_orders_are_counted_totalled_and_linked(
    settings, big_order, alice, reviewer_client, django_capture_on_commit_callbacks
):
    settings.STAFF_REVIEW_THRESHOLDS = {**settings.STAFF_REVIEW_THRESHOLDS, "JPY": 10000}
    OrderFactory(number="o-78", customer=alice, currency="EUR", total_minor=9000)
    OrderFactory(number="o-jp", customer=alice, currency="JPY", total_minor=90000)
    OrderFactory(number="o-failed", customer=alice, currency="EUR", total_minor=9000)
    bob = UserFactory(username="bob")
    OrderFactory(number="o-bob", customer=bob, currency="EUR", total_minor=9000)
    first = executed(alice, "o-78", 2500, django_capture_on_commit_callbacks)
    second = executed(alice, "o-jp", 500, django_capture_on_commit_callbacks)
    bounced = executed(alice, "o-failed", 3000, django_capture_on_commit_callbacks)
    Refund.objects.filter(preview=bounced).update(status=RefundStatus.FAILED)
    bobs = executed(bob, "o-bob", 4000, django_capture_on_commit_callbacks)
    now = confirmed(proposed(alice, big_order.number, 12000))

    html = reviewer_client.get(f"/console/previews/{now.pk}/").content.decode()

    history = section(html, "history-title")
    assert "Earlier refunds of alice" in history
    assert "Across all their orders: 2, €25.00 and ¥500 in total." in history
    assert f'href="/console/previews/{first.pk}/"' in html and f'href="/console/previews/{second.pk}/"' in html
    assert "o-78" in history and "o-jp" in history
    assert "o-failed" not in history and "€30.00" not in history  # the bank failed it: the money came back
    assert "o-bob" not in history and str(bobs.pk) not in html


def test_a_first_time_customer_has_no_earlier_refunds(big_order, reviewer_client):
    now = confirmed(proposed(big_order.customer, big_order.number, 12000))
    html = reviewer_client.get(f"/console/previews/{now.pk}/").content.decode()
    assert "No earlier refunds." in section(html, "history-title")
