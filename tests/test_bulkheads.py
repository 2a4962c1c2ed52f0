"""Bulkheads, with real processes on PostgreSQL and Redis: best-effort traffic that misbehaves holds only
its own resources. Webhook receivers that drip bytes or never answer hold the `deliveries` workers, never
the `executions` ones; long-polls hold at most half of each web process's threads and a few per session,
so the login page and proposals keep answering. Each test starts the processes the way the deployment
does (one worker per configured queue; gunicorn with config/gunicorn.conf.py's defaults) and checks what
answered while the misbehaving traffic was still held, not how fast."""

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest
from django.conf import settings

from approvals.agents import webhooks
from approvals.core.services import agent_session_create, preview_approve
from approvals.models import (
    ApprovalRole,
    AuditEvent,
    AuditRecord,
    OutboxMessage,
    Preview,
    PreviewStatus,
    WebhookDelivery,
    WebhookDeliveryStatus,
)
from refunds.models import LocalGatewayRefund, Order, Refund
from tests import workers
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory, UserFactory
from tests.stuck_receivers import StuckReceiver
from tests.workers import ROOT, all_queues, free_port, publishing_to, start_worker, stop, stop_now, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

RECEIVERS_HOLD_SECONDS = 60.0
DEADLINE_SECONDS = "30"  # shorter than the receivers hold their connections, longer than a refund takes


def test_stuck_webhook_receivers_never_delay_an_unrelated_refund(settings):
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    settings.CELERY_TASK_ALWAYS_EAGER = False  # webhooks publish to the broker, as in production
    drip = StuckReceiver("drip_body", seconds=RECEIVERS_HOLD_SECONDS, interval=2.0)
    silent = StuckReceiver("silent", seconds=RECEIVERS_HOLD_SECONDS)
    bob = UserFactory(username="bob")
    for number in range(4):
        OrderFactory(number=f"b-{number}", customer=bob, currency="EUR", total_minor=5000)
    agents = {}
    for receiver in (drip, silent):
        session, token = agent_session_create(user=bob, tools=["refund_order"])
        webhooks.agent_session_webhook_set(session, receiver.url)
        agents[receiver] = agent_client_for(bob)
        agents[receiver].credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    refund_preview_id = propose(agent_client_for(alice), order_id="o-12", amount_minor=321, reason="damaged").json()[
        "preview"
    ]["id"]

    env = (("AGENT_WEBHOOK_ALLOW_PRIVATE", "true"), ("AGENT_WEBHOOK_DEADLINE_SECONDS", DEADLINE_SECONDS))
    # The worker pools as deployed: one per queue; the deliveries' pool has two processes, as many
    # stuck receivers as below take them both, and two more messages wait behind them.
    pools = [
        start_worker(settings.REDIS_URL, *env, name=f"bulkhead-{queue}", queues=[queue], concurrency=2)
        for queue in all_queues()
    ]
    try:
        with publishing_to(settings.REDIS_URL):
            # Each proposal's first transition is a message to its session's receiver: drip, silent, drip, silent.
            for number in range(4):
                receiver = (drip, silent)[number % 2]
                response = propose(agents[receiver], order_id=f"b-{number}", amount_minor=100, reason="damaged")
                assert response.status_code == 201, response.json()
            assert wait_for(lambda: drip.requests >= 1 and silent.requests >= 1, timeout=60), (
                "no receiver was sent anything"
            )
            assert drip.still_stuck and silent.still_stuck

            preview = Preview.objects.get(pk=refund_preview_id)
            preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
            stuck_when_executed = []

            def executed_or_given_up():
                if Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED:
                    stuck_when_executed.append((drip.still_stuck, silent.still_stuck))
                    return True
                return not drip.still_stuck  # the first drip ended: the refund waited for it

            wait_for(executed_or_given_up, timeout=RECEIVERS_HOLD_SECONDS + 30)
            waiting_deliveries = list(
                WebhookDelivery.objects.filter(status=WebhookDeliveryStatus.PENDING).values_list("url", flat=True)
            )
            given_up = WebhookDelivery.objects.filter(status=WebhookDeliveryStatus.FAILED).count()
            owed = OutboxMessage.objects.filter(kind="agent_webhook", delivered_at__isnull=True).count()
    finally:
        logs = [stop_now(pool) for pool in pools]
        drip.close()
        silent.close()
    assert stuck_when_executed == [(True, True)], "the refund executed only after a receiver let go:\n" + "\n".join(
        log[-1500:] for log in logs
    )
    # The ledger and the state: paid once, for the amount the customer confirmed.
    refund = Refund.objects.get()
    assert (refund.preview_id, refund.amount_minor, refund.currency) == (preview.pk, 321, "EUR")
    assert LocalGatewayRefund.objects.get().idempotency_key == f"refund:{preview.pk}"
    assert Order.objects.get(number="o-12").refunded_minor == 321
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED
    assert AuditRecord.objects.filter(preview_id=preview.pk, event=AuditEvent.EXECUTED).count() == 1
    # The receivers' messages were still in progress (an attempt counted as it starts) or waiting: none
    # had been given up on.
    # Each receiver's first message is an attempt in progress; every message is still owed by the outbox.
    assert set(waiting_deliveries) == {drip.url, silent.url} and given_up == 0
    assert owed == 4


def start_gunicorn(port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": workers.test_database_url(),
        "SECRET_KEY": "test-only-secret-key-not-for-any-deployment-0123456789",
        "REDIS_URL": settings.REDIS_URL,  # the sessions' wait counts are shared through it, as in production
        "CELERY_TASK_ALWAYS_EAGER": "true",
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "2",
    }
    for name in ("GUNICORN_WORKER_CLASS", "GUNICORN_THREADS", "AGENT_PREVIEW_WAITS_MAX"):
        env.pop(name, None)  # the configuration's own defaults are what is tested
    return subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_long_polls_from_one_token_and_from_many_leave_the_login_page_and_proposals_answering():
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    OrderFactory(number="o-13", customer=alice, currency="EUR", total_minor=1000)
    _one_session, one_token = agent_session_create(user=alice, tools=["refund_order"])
    many_tokens = [agent_session_create(user=alice, tools=["refund_order"])[1] for _ in range(6)]
    _session, proposing_token = agent_session_create(user=alice, tools=["refund_order"])
    preview_id = propose(agent_client_for(alice), order_id="o-12", amount_minor=500, reason="damaged").json()[
        "preview"
    ]["id"]

    port = free_port()
    server = start_gunicorn(port)
    base = f"http://127.0.0.1:{port}"
    waits: list[tuple[float, httpx.Response]] = []
    lock = threading.Lock()

    def long_poll(token: str) -> None:
        response = httpx.get(
            f"{base}/api/agent/previews/{preview_id}?wait=10", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        with lock:
            waits.append((time.monotonic(), response))

    try:

        def up():
            try:
                return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        assert wait_for(up, timeout=60), stop(server)
        pollers = [threading.Thread(target=long_poll, args=(one_token,)) for _ in range(6)]
        pollers += [threading.Thread(target=long_poll, args=(token,)) for token in many_tokens]
        polls_started = time.monotonic()
        for poller in pollers:
            poller.start()
        time.sleep(1.5)  # every long-poll has reached the server and is held or answered
        login = httpx.get(f"{base}/accounts/login/", timeout=60)
        login_answered = time.monotonic()
        proposal = httpx.post(
            f"{base}/api/agent/tool-calls",
            json={"name": "refund_order", "arguments": {"order_id": "o-13", "amount_minor": 250, "reason": "damaged"}},
            headers={"Authorization": f"Bearer {proposing_token}"},
            timeout=60,
        )
        proposal_answered = time.monotonic()
        for poller in pollers:
            poller.join(timeout=60)
    finally:
        output = stop(server)

    assert login.status_code == 200, output[-3000:]
    assert 'name="password"' in login.text and 'name="username"' in login.text
    assert proposal.status_code == 201, proposal.text
    assert proposal.json()["status"] == "awaiting_customer"
    assert proposal.json()["preview"]["id"] != preview_id
    held = [(at, response) for at, response in waits if "Preview-Wait-Declined" not in response.headers]
    declined = [response for _at, response in waits if "Preview-Wait-Declined" in response.headers]
    assert held, "no long-poll was held at all"
    # The page and the proposal answered while the held long-polls were still waiting.
    first_held_returned = min(at for at, _response in held)
    assert login_answered < first_held_returned and proposal_answered < first_held_returned, (
        f"the login page answered {login_answered - polls_started:.1f} s and the proposal "
        f"{proposal_answered - polls_started:.1f} s after the long-polls began; the first held one returned "
        f"after {first_held_returned - polls_started:.1f} s"
    )
    assert len(waits) == 12, output[-3000:]
    # Never an error: every long-poll answered the preview as it is, waited or not.
    for _at, response in waits:
        assert response.status_code == 200, response.text
        assert (response.json()["preview"]["id"], response.json()["status"]) == (preview_id, "awaiting_customer")
    # At most half the threads of each of the two processes (two threads each) wait at once.
    assert len(held) <= 2 and len(declined) >= 10
    assert {response.headers["Preview-Wait-Declined"] for response in declined} <= {"session", "process"}
    for response in declined:
        assert response.headers["Preview-Waited-Seconds"] == "0.0"
    assert "Traceback" not in output, output[-3000:]
