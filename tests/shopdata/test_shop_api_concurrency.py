"""A PUT of an order and the confirmation of a refund on it, at the same time, on PostgreSQL: real
transactions in threads, real row locks. Whichever order they take the lock in, the books stay true:
never more refunded than the order's total, and the refund is either paid and recorded or not asked."""

import threading
from dataclasses import replace

import pytest
from django.db import connection

from approvals.core.errors import DecisionError
from approvals.core.registry import registry
from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, Preview, PreviewStatus
from refunds.gateways import LocalGateway
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory, UserFactory
from tests.shopdata.test_shop_api import ORDER, put, shop_client

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LOWERED = {**ORDER, "id": "o-12", "total_minor": 500, "payment_ref": "pi_o-12"}


def run(target, results, name):
    def body():
        try:
            results[name] = target()
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            results[name] = error
        finally:
            connection.close()

    thread = threading.Thread(target=body, name=name)
    thread.start()
    return thread


@pytest.fixture
def setting():
    """Alice's order o-12 (10.00 EUR, nothing refunded), her agent's 8.00 refund waiting for her, and a
    shop token."""
    alice = UserFactory(username="alice")
    order = OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    response = propose(agent_client_for(alice), order_id="o-12", amount_minor=800, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    return alice, order, preview, shop_client()


def confirm(alice, preview):
    # Committed in its own transaction; the execution runs eagerly when it commits.
    preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    return Preview.objects.get(pk=preview.pk)


def test_a_put_holding_the_orders_lock_makes_the_confirmation_wait_then_refuse(setting, monkeypatch):
    alice, order, preview, shop = setting
    section = registry.import_sections["orders"]
    written, release = threading.Event(), threading.Event()

    def write_then_hold(item):
        outcome = section.write(item)  # the order's row is locked (SELECT … FOR UPDATE) and changed
        written.set()
        assert release.wait(10)
        return outcome

    monkeypatch.setitem(registry.import_sections, "orders", replace(section, write=write_then_hold))
    results: dict = {}
    putter = run(lambda: put(shop, "/api/shop/orders/o-12", LOWERED), results, "put")
    assert written.wait(10)
    confirmer = run(lambda: confirm(alice, preview), results, "confirm")
    confirmer.join(0.7)
    assert confirmer.is_alive()  # waiting for the order's lock, which the PUT holds
    release.set()
    putter.join(10)
    confirmer.join(10)

    assert results["put"].status_code == 200
    assert results["put"].json()["record"]["total_minor"] == 500
    refused = results["confirm"]  # the confirmation read the order once the PUT committed: it changed
    assert isinstance(refused, DecisionError), refused
    assert refused.code == "superseded"
    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.SUPERSEDED, "subject_changed")
    order.refresh_from_db()
    assert (order.total_minor, order.refunded_minor, order.version) == (500, 0, 2)
    assert Refund.objects.count() == 0
    assert LocalGatewayRefund.objects.count() == 0


def test_a_put_while_the_refund_is_at_the_provider_counts_it_and_is_refused(setting, monkeypatch):
    alice, order, preview, shop = setting
    at_provider, release = threading.Event(), threading.Event()
    real_refund = LocalGateway.refund

    def slow_refund(self, **kwargs):
        at_provider.set()
        assert release.wait(10)
        return real_refund(self, **kwargs)

    monkeypatch.setattr(LocalGateway, "refund", slow_refund)
    results: dict = {}
    confirmer = run(lambda: confirm(alice, preview), results, "confirm")
    assert at_provider.wait(10)  # the refund is being asked for, no lock held: it is in flight

    refused = put(shop, "/api/shop/orders/o-12", LOWERED)
    release.set()
    confirmer.join(10)

    assert refused.status_code == 400
    assert refused.json()["error"]["problems"] == [
        "$.refunded_minor: 0 plus the 800 being refunded right now exceeds the total of 500; "
        "wait until those refunds are recorded."
    ]
    assert results["confirm"].status == PreviewStatus.EXECUTED
    order.refresh_from_db()
    assert (order.total_minor, order.refunded_minor, order.version) == (1000, 800, 2)
    assert Refund.objects.get().amount_minor == 800
    # Now recorded, the same lowering is refused for what the ledger holds.
    after = put(shop, "/api/shop/orders/o-12", LOWERED)
    assert after.status_code == 400
    assert after.json()["error"]["problems"] == [
        "$.refunded_minor: Cannot be below the 800 already refunded through the gateway."
    ]
    assert Order.objects.get(number="o-12").total_minor == 1000
