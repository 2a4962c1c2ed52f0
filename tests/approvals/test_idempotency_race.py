"""Concurrent tool calls (PostgreSQL): one key, or one pending proposal, gives one preview."""

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from approvals.models import AuditRecord, IdempotencyRecord, Preview
from refunds.models import Refund
from tests.factories import OrderFactory, UserFactory

THREADS = 8
BODY = {"name": "refund_order", "arguments": {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}}

pytestmark = pytest.mark.postgres


@pytest.fixture
def token(transactional_db):
    from approvals.core.services import agent_session_create

    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    _session, token = agent_session_create(user=alice, tools=["refund_order"])
    return token


def post_at_once(token, headers):
    barrier = threading.Barrier(THREADS)
    answers = [None] * THREADS
    errors = []

    def worker(index):
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
            barrier.wait(timeout=30)
            response = client.post("/api/agent/tool-calls", BODY, format="json", headers=headers)
            answers[index] = (response.status_code, response.json())
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a request hung"
    assert errors == []
    return answers


def assert_one_preview(answers):
    statuses = sorted(status for status, _ in answers)
    assert set(statuses) <= {200, 201}, answers
    assert statuses.count(201) == 1, answers
    preview = Preview.objects.get()
    assert {body["preview"]["id"] for _, body in answers} == {str(preview.pk)}
    assert all(body["ok"] is True and body["executed"] is False for _, body in answers)
    assert preview.amount_minor == 500
    assert preview.currency == "EUR"
    assert Refund.objects.count() == 0
    assert AuditRecord.objects.filter(event="proposed").count() == 1
    return preview


def test_eight_posts_with_one_idempotency_key_make_one_preview(token):
    answers = post_at_once(token, {"Idempotency-Key": "race-1"})

    assert_one_preview(answers)
    record = IdempotencyRecord.objects.get()
    assert (record.key, record.response_status) == ("race-1", 201)


def test_eight_posts_of_one_proposal_without_a_key_make_one_preview(token):
    answers = post_at_once(token, {})

    preview = assert_one_preview(answers)
    assert IdempotencyRecord.objects.count() == 0
    assert AuditRecord.objects.filter(event="proposal_repeated", preview=preview).count() == THREADS - 1
