"""A real worker process: its JSON log lines carry the confirming request's id and the preview's ids,
and its own /metrics (CELERY_METRICS_PORT, multiprocess registry) counts the execution."""

import json
import logging
import urllib.error
import urllib.request

import pytest
from django.conf import settings

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, Preview, PreviewStatus
from approvals.operations import logs
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory, UserFactory
from tests.operations.helpers import METRICS_TOKEN, samples, value
from tests.workers import free_port, publishing_to, start_worker, stop, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def get(url, token=None):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
    except OSError:
        return None, ""


def test_a_worker_logs_json_joined_on_the_preview_and_serves_its_metrics(transactional_db, tmp_path):
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    agent = agent_client_for(alice)
    response = propose(agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])

    port = free_port()
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    worker = start_worker(
        settings.REDIS_URL,
        ("LOG_FORMAT", "json"),
        ("METRICS_TOKEN", METRICS_TOKEN),
        ("CELERY_METRICS_PORT", str(port)),
        ("PROMETHEUS_MULTIPROC_DIR", str(metrics_dir)),
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        assert wait_for(lambda: get(url)[0] == 401, timeout=60), "the worker's exporter did not start"
        token = logs.bind(request_id="req-confirm-worker")
        try:
            with publishing_to(settings.REDIS_URL):
                preview_approve(
                    preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest
                )
        finally:
            logs.reset(token)
        assert wait_for(lambda: Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED, timeout=60)
        assert get(url, "wrong")[0] == 403
        status, text = get(url, METRICS_TOKEN)
    finally:
        output = stop(worker)
    assert status == 200, output[-3000:]
    parsed = samples(text)
    assert value(parsed, "gateway_executions_total", action="refund_order", outcome="succeeded", error_class="") == 1
    assert value(parsed, "gateway_confirm_to_executed_seconds_count", action="refund_order") == 1
    # The database gauges are the web's to serve, not every worker's.
    assert "gateway_previews" not in text

    lines = []
    for raw in output.splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            continue
    assert lines, output[-3000:]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    ours = [line for line in lines if line.get("preview_id") == str(preview.pk)]
    executed = [line for line in ours if line["message"] == "execution succeeded"]
    assert len(executed) == 1, output[-3000:]
    assert (executed[0]["request_id"], executed[0]["agent_session"], executed[0]["action"]) == (
        "req-confirm-worker",
        str(agent.agent_session.pk),
        "refund_order",
    )
    # Celery's own lines about the task carry the same ids.
    assert any(
        line["logger"].startswith("celery") and line.get("request_id") == "req-confirm-worker" for line in ours
    ), output[-3000:]
    assert agent.token not in output
    logging.getLogger(__name__).info("worker output had %d JSON lines", len(lines))
