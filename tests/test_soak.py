"""Soak: many agents propose and customers confirm against a live server while two worker processes
execute through Redis against a payment provider that fails now and then. Afterwards the
invariants must hold on the database and at the provider."""

import random
import re
import threading
from collections import defaultdict

import pytest
import requests
from django.conf import settings
from django.db import connection
from django.db.models import Sum

from approvals.audit.seal import audit_verify, public_key
from approvals.core.services import agent_session_create
from approvals.models import AuditLeaf, AuditRecord, Preview, PreviewStatus
from refunds.models import Order, Refund
from tests.conftest import seal_all
from tests.factories import OrderFactory, UserFactory
from tests.refunds.fake_stripe import FakeStripe
from tests.workers import publishing_to, start_worker, stop, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

CUSTOMERS = 6
ORDERS_EACH = 3
PROPOSALS_EACH = 8
PASSWORD = "soak-pass-for-tests"
TERMINAL = {
    PreviewStatus.EXECUTED,
    PreviewStatus.FAILED,
    PreviewStatus.SUPERSEDED,
    PreviewStatus.DECLINED,
    PreviewStatus.EXPIRED,
    PreviewStatus.REJECTED,
}


def _customer_run(base_url, username, token, order_numbers, seed, outcomes, lock):
    """One agent session proposing, and its customer confirming in a browser session."""
    rng = random.Random(seed)
    agent = requests.Session()
    agent.headers["Authorization"] = f"Bearer {token}"
    browser = requests.Session()
    browser.get(f"{base_url}/accounts/login/", timeout=10)
    browser.post(
        f"{base_url}/accounts/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
        headers={"Referer": f"{base_url}/accounts/login/"},
        timeout=10,
    )
    for n in range(PROPOSALS_EACH):
        order = rng.choice(order_numbers)
        amount = rng.choice([100, 250, 400, 5000])  # 5000 exceeds every order: refused
        key = f"{username}-{n}"
        body = {"name": "refund_order", "arguments": {"order_id": order, "amount_minor": amount, "reason": "damaged"}}
        answers = [
            agent.post(f"{base_url}/api/agent/tool-calls", json=body, headers={"Idempotency-Key": key}, timeout=30)
        ]
        if rng.random() < 0.3:  # the agent retries the same call: a replay
            answers.append(
                agent.post(f"{base_url}/api/agent/tool-calls", json=body, headers={"Idempotency-Key": key}, timeout=30)
            )
        with lock:
            outcomes["statuses"].extend(a.status_code for a in answers)
        first = answers[0]
        if first.status_code not in (200, 201):
            continue
        preview = first.json()["preview"]
        page = browser.get(preview["confirm_url"], timeout=10)
        digest = re.search(r'name="digest" value="([0-9a-f]{64})"', page.text)
        if digest is None:
            continue  # already decided, superseded or out of date
        action = "decline" if rng.random() < 0.1 else "confirm"
        response = browser.post(
            f"{base_url}/previews/{preview['id']}/{action}",
            data={"digest": digest.group(1), "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
            headers={"Referer": preview["confirm_url"]},
            timeout=30,
            allow_redirects=False,
        )
        with lock:
            outcomes["decisions"].append(response.status_code)


def test_soak_many_agents_two_workers_and_a_flaky_provider_keep_every_invariant(live_server, transactional_db):
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    settings.LOGIN_FAILURE_LIMIT = 10**6
    fake = FakeStripe().start()
    sessions = []
    for c in range(CUSTOMERS):
        customer = UserFactory(username=f"soak{c}")
        customer.set_password(PASSWORD)
        customer.save()
        numbers = []
        for o in range(ORDERS_EACH):
            number = f"S-{c}-{o}"
            OrderFactory(number=number, customer=customer, currency="EUR", total_minor=1000, payment_ref=f"pi_{number}")
            fake.add_payment_intent(f"pi_{number}", amount=1000, currency="eur")
            numbers.append(number)
        _session, token = agent_session_create(user=customer, tools=["refund_order"])
        sessions.append((customer.username, token, numbers))

    # Faults spread over the run: 500s, time-outs after the refund was recorded, key-in-use conflicts.
    rng = random.Random(7)
    for _ in range(12):
        rng.choice(
            [lambda: fake.fail_next(1), lambda: fake.time_out_next(1, seconds=1.5), lambda: fake.conflict_next(1)]
        )()

    worker_env = (
        ("PAYMENT_GATEWAY", "stripe"),
        ("STRIPE_API_KEY", "sk_test_x"),
        ("STRIPE_API_BASE", fake.url),
        ("STRIPE_TIMEOUT_SECONDS", "1"),
    )
    workers = [start_worker(settings.REDIS_URL, *worker_env, name=f"soak{i}") for i in range(2)]
    outcomes, lock = defaultdict(list), threading.Lock()
    try:
        with publishing_to(settings.REDIS_URL):
            threads = [
                threading.Thread(target=_customer_run, args=(live_server.url, u, t, n, i, outcomes, lock))
                for i, (u, t, n) in enumerate(sessions)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=300)
            settled = wait_for(
                lambda: not Preview.objects.filter(status=PreviewStatus.APPROVED).exists(), timeout=240, interval=0.5
            )
    finally:
        logs = [stop(worker) for worker in workers]
        fake.stop()
        connection.close()
    assert settled, "approved previews left unexecuted:\n" + "\n".join(log[-2000:] for log in logs)

    # Every answer was one the contract allows; nothing crashed.
    assert outcomes["statuses"] and set(outcomes["statuses"]) <= {200, 201, 422}, outcomes["statuses"]
    assert set(outcomes["decisions"]) <= {302, 409}

    # For every order: refunded ≤ total, and refunded = the sum of its ledger rows.
    for order in Order.objects.all():
        ledger = Refund.objects.filter(order=order).aggregate(total=Sum("amount_minor"))["total"] or 0
        assert order.refunded_minor == ledger <= order.total_minor, order.number

    # One provider refund per executed preview, under its own key; nothing else was paid.
    executed = Preview.objects.filter(status=PreviewStatus.EXECUTED)
    assert executed.count() > 0
    provider_keys = [refund["metadata"].get("idempotency_key") for refund in fake.refunds]
    assert sorted(provider_keys) == sorted(f"refund:{p.pk}" for p in executed)
    assert {r.gateway_refund_id for r in Refund.objects.all()} == {refund["id"] for refund in fake.refunds}
    for intent in fake.payment_intents.values():
        assert intent.refunded <= intent.amount

    # No executed preview without the approvals it required, bound to its digest.
    for preview in executed.prefetch_related("approvals"):
        roles = {a.role for a in preview.approvals.all() if a.digest == preview.digest}
        assert set(preview.required_approvals) <= roles, preview.pk
    assert (
        not Preview.objects.exclude(status__in=TERMINAL)
        .filter(approvals__isnull=False, status=PreviewStatus.AWAITING_CUSTOMER)
        .exists()
    )

    # Every audit record, written concurrently, is sealed exactly once and the log verifies.
    seal_all()
    assert AuditLeaf.objects.count() == AuditRecord.objects.count()
    summary = audit_verify(public_key=public_key())
    assert summary.problem is None and summary.leaves == AuditRecord.objects.count()
