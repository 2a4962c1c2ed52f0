"""The real path: a confirmation commits, the task goes through Redis, a separate worker executes it."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from approvals.models import ApprovalRole, Preview, PreviewStatus
from approvals.services import preview_approve
from approvals.tasks import execute_preview
from config.celery import app as celery_app
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory, UserFactory

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

ROOT = Path(__file__).resolve().parent.parent


def _database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def worker():
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_TASK_ALWAYS_EAGER": "false",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo", "--loglevel=INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = False
    try:
        yield process
    finally:
        celery_app.conf.task_always_eager = eager
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def _wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_confirmation_is_executed_once_by_a_separate_worker_through_redis(transactional_db, worker):
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    response = propose(agent_client_for(alice), order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])

    preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    # The web process did not execute it: the status is approved until the worker runs.
    assert Preview.objects.get(pk=preview.pk).status in (PreviewStatus.APPROVED, PreviewStatus.EXECUTED)

    executed = _wait_for(lambda: Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED)
    if not executed:
        worker.terminate()
        pytest.fail("worker did not execute the preview:\n" + worker.communicate(timeout=20)[0][-3000:])

    # Deliver the same task twice more: the worker must not pay again.
    execute_preview.delay(str(preview.pk))
    execute_preview.delay(str(preview.pk))
    time.sleep(2)

    refund = Refund.objects.get()
    assert (refund.preview_id, refund.amount_minor, refund.currency) == (preview.pk, 500, "EUR")
    assert LocalGatewayRefund.objects.get().idempotency_key == f"refund:{preview.pk}"
    order = Order.objects.get(number="o-12")
    assert (order.refunded_minor, order.version) == (500, 2)

    worker.terminate()
    log = worker.communicate(timeout=20)[0]
    assert log.count("approvals.execute_preview[") >= 3, log[-3000:]
