"""/metrics: refused without the token, and the counters move by exactly what a scripted flow did."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.core.errors import DecisionError
from approvals.core.services import preview_approve, preview_decline
from approvals.models import ApprovalRole, Preview, PreviewStatus
from approvals.operations.metrics import PipelineCollector, _counted_statuses
from tests.conftest import propose, tampering
from tests.factories import OrderFactory
from tests.operations.helpers import METRICS_TOKEN, samples, scrape, value

ACTION = "refund_order"


@pytest.fixture
def metrics_token(settings):
    settings.METRICS_TOKEN = METRICS_TOKEN


def test_metrics_are_off_without_a_token(client, settings):
    settings.METRICS_TOKEN = ""
    response = client.get("/metrics", headers={"Authorization": "Bearer "})
    assert response.status_code == 404


def test_metrics_are_refused_without_the_right_bearer_token(client, metrics_token):
    missing = client.get("/metrics")
    assert missing.status_code == 401
    assert missing["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert missing.json()["error"]["code"] == "not_authenticated"
    for header in (f"Bearer {METRICS_TOKEN}x", f"Basic {METRICS_TOKEN}", "Bearer wrong", METRICS_TOKEN):
        response = client.get("/metrics", headers={"Authorization": header})
        assert response.status_code in (401, 403), header
        assert b"gateway_" not in response.content


def test_metrics_answer_by_ip_address_with_the_token(client, db, metrics_token):
    response = client.get("/metrics", HTTP_HOST="10.1.2.3:8000", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert response.status_code == 200
    assert b"# TYPE gateway_proposals_total counter" in response.content


def confirm(preview, person, capture):
    with capture(execute=True):
        preview_approve(preview_id=preview.pk, approver=person, role=ApprovalRole.CUSTOMER, digest=preview.digest)


def test_a_scripted_flow_moves_each_counter_by_what_it_did(
    client, metrics_token, alice, o12, ord4417, alice_agent, django_capture_on_commit_callbacks
):
    before = samples(scrape(client))

    # Proposed, confirmed, executed.
    created = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert created.status_code == 201, created.json()
    preview = Preview.objects.get(pk=created.json()["preview"]["id"])
    confirm(preview, alice, django_capture_on_commit_callbacks)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    # A refusal (seed 001: 24990 on ORD-4417, 2499 remain).
    refused = propose(alice_agent, order_id="ORD-4417", amount_minor=24990, reason="damaged")
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "amount_exceeds_remaining"
    # The same Idempotency-Key twice: created, then replayed.
    key = {"Idempotency-Key": "metrics-flow-1"}
    first = propose(alice_agent, headers=key, order_id="o-12", amount_minor=100, reason="damaged")
    replay = propose(alice_agent, headers=key, order_id="o-12", amount_minor=100, reason="damaged")
    assert (first.status_code, replay.status_code) == (201, 200)
    # The same pending proposal again without a key: repeated. Then the customer declines it.
    repeated = propose(alice_agent, order_id="o-12", amount_minor=100, reason="damaged")
    assert repeated.status_code == 200 and repeated.json()["preview"]["id"] == first.json()["preview"]["id"]
    # A malformed call, refused before the policy.
    invalid = propose(alice_agent, order_id="o-12", amount_minor=100, reason="damaged", currency="EUR")
    assert invalid.status_code == 400
    waiting = Preview.objects.get(pk=first.json()["preview"]["id"])

    after = samples(scrape(client))

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("gateway_proposals_total", action=ACTION, outcome="created", code="") == 2
    assert moved("gateway_proposals_total", action=ACTION, outcome="refused", code="amount_exceeds_remaining") == 1
    assert moved("gateway_proposals_total", action=ACTION, outcome="replayed", code="") == 1
    assert moved("gateway_proposals_total", action=ACTION, outcome="repeated", code="") == 1
    assert moved("gateway_proposals_total", action=ACTION, outcome="invalid", code="invalid_arguments") == 1
    assert moved("gateway_decisions_total", action=ACTION, role="customer", decision="confirmed", code="") == 1
    assert moved("gateway_executions_total", action=ACTION, outcome="succeeded", error_class="") == 1
    assert moved("gateway_confirm_to_executed_seconds_count", action=ACTION) == 1
    assert moved("gateway_confirm_to_executed_seconds_bucket", action=ACTION, le="+Inf") == 1
    assert moved("gateway_executions_total", action=ACTION, outcome="failed_after_check", error_class="") == 0
    # Per view, method and status: the four 201/200 proposals, the 422 and the 400.
    view = {"view": "agent-tool-calls", "method": "POST"}
    assert moved("gateway_http_requests_total", **view, status="201") == 2
    assert moved("gateway_http_requests_total", **view, status="200") == 2
    assert moved("gateway_http_requests_total", **view, status="422") == 1
    assert moved("gateway_http_requests_total", **view, status="400") == 1
    assert moved("gateway_http_request_duration_seconds_count", **view) == 6
    # The one scrape in between is counted too.
    assert moved("gateway_http_requests_total", view="metrics", method="GET", status="200") == 1

    # The gauges are read from the database: one preview waits for the customer.
    assert value(after, "gateway_previews", action=ACTION, status="awaiting_customer") == 1
    assert value(after, "gateway_previews", action=ACTION, status="approved") == 0
    assert value(after, "gateway_pipeline_metrics_up") == 1
    age = value(after, "gateway_preview_oldest_age_seconds", action=ACTION, status="awaiting_customer")
    assert 0 < age < 60

    preview_decline(preview_id=waiting.pk, person=alice, role=ApprovalRole.CUSTOMER, digest=waiting.digest)
    final = samples(scrape(client))
    assert value(final, "gateway_previews", action=ACTION, status="awaiting_customer") == 0
    assert value(final, "gateway_decisions_total", action=ACTION, role="customer", decision="declined", code="") == (
        value(after, "gateway_decisions_total", action=ACTION, role="customer", decision="declined", code="") + 1
    )


def test_a_refused_decision_and_a_refusal_before_the_effect_are_counted_by_code(
    client, metrics_token, alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = Preview.objects.get(
        pk=propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged").json()["preview"]["id"]
    )
    before = samples(scrape(client))
    # The order changes between the confirmation and the execution: refused before any effect.
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    o12.version += 1
    o12.save(update_fields=["version"])
    for callback in callbacks:
        callback()
    with pytest.raises(DecisionError, match="no longer be decided: it is superseded"):
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    after = samples(scrape(client))

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert (
        moved("gateway_executions_total", action=ACTION, outcome="refused_before_effect", error_class="subject_changed")
        == 1
    )
    assert moved("gateway_executions_total", action=ACTION, outcome="succeeded", error_class="") == 0
    assert (
        moved(
            "gateway_decisions_total", action=ACTION, role="customer", decision="refused", code="not_awaiting_decision"
        )
        == 1
    )


def test_every_state_that_is_not_settled_has_a_gauge_for_every_action(client, metrics_token, db):
    parsed = samples(scrape(client))
    statuses = _counted_statuses()
    assert {"awaiting_customer", "awaiting_staff", "approved"} <= set(statuses)
    assert not {"executed", "declined", "rejected", "expired", "superseded", "failed", "withdrawn"} & set(statuses)
    # Derived from PreviewStatus: a status added later (needs_attention) is counted without a change here.
    assert set(statuses) == {s.value for s in PreviewStatus} - {
        "executed",
        "declined",
        "rejected",
        "expired",
        "superseded",
        "failed",
        "withdrawn",
    }
    for action in ("refund_order", "send_invoice"):
        for status in statuses:
            assert ("gateway_previews", frozenset({"action": action, "status": status}.items())) in parsed


def test_the_oldest_preview_waiting_for_staff_is_measured(
    client, metrics_token, alice, alice_agent, settings, django_capture_on_commit_callbacks
):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 100}
    OrderFactory(number="o-90", customer=alice, currency="EUR", total_minor=5000)
    preview = Preview.objects.get(
        pk=propose(alice_agent, order_id="o-90", amount_minor=500, reason="damaged").json()["preview"]["id"]
    )
    confirm(preview, alice, django_capture_on_commit_callbacks)
    with tampering():
        # Proposed an hour ago, confirmed (so waiting for staff) 42 minutes ago.
        Preview.objects.filter(pk=preview.pk).update(
            created_at=timezone.now() - timedelta(minutes=60), status_changed_at=timezone.now() - timedelta(minutes=42)
        )
    parsed = samples(scrape(client))
    assert value(parsed, "gateway_previews", action=ACTION, status="awaiting_staff") == 1
    age = value(parsed, "gateway_preview_oldest_age_seconds", action=ACTION, status="awaiting_staff")
    assert 42 * 60 <= age < 43 * 60


def test_the_previews_gauge_is_one_query_whatever_the_count(alice, o12, alice_agent, django_assert_num_queries):
    for amount in range(1, 6):
        assert propose(alice_agent, order_id="o-12", amount_minor=amount, reason="damaged").status_code == 201
    with django_assert_num_queries(1):
        families = {family.name: family for family in PipelineCollector().collect()}
    waiting = [
        s
        for s in families["gateway_previews"].samples
        if s.labels["status"] == "awaiting_customer" and s.labels["action"] == ACTION
    ]
    assert [s.value for s in waiting] == [5]
