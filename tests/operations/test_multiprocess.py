"""Several processes (gunicorn workers, Celery's pool): /metrics adds up every process's counters from
PROMETHEUS_MULTIPROC_DIR, and gunicorn's child_exit hook marks an exited worker dead."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.operations.helpers import METRICS_TOKEN, samples, value

ROOT = Path(__file__).resolve().parents[2]

COUNT_ONE_PROPOSAL = """
import django
django.setup()
from approvals.operations import metrics
metrics.proposals.labels("refund_order", "created", "").inc()
metrics.http_request("agent-tool-calls", "POST", 201, 0.004)
"""


def test_metrics_add_up_the_counters_of_every_process(client, db, settings, tmp_path, monkeypatch):
    settings.METRICS_TOKEN = METRICS_TOKEN
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": "sqlite:///:memory:",
        "REDIS_URL": "",
    }
    for _worker in range(2):
        result = subprocess.run(
            [sys.executable, "-c", COUNT_ONE_PROPOSAL], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
    assert len(list(tmp_path.glob("counter_*.db"))) == 2  # one file per process

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    response = client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    parsed = samples(response.content.decode())
    assert value(parsed, "gateway_proposals_total", action="refund_order", outcome="created", code="") == 2
    view = {"view": "agent-tool-calls", "method": "POST"}
    assert value(parsed, "gateway_http_requests_total", **view, status="201") == 2
    assert value(parsed, "gateway_http_request_duration_seconds_count", **view) == 2
    # The gauges computed from the database are served alongside.
    assert value(parsed, "gateway_pipeline_metrics_up") == 1


def test_gunicorns_child_exit_marks_the_worker_dead(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("gunicorn_conf", ROOT / "config" / "gunicorn.conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    live = tmp_path / "gauge_livesum_4242.db"
    kept = tmp_path / "counter_4242.db"
    live.write_bytes(b"")
    kept.write_bytes(b"")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    conf.child_exit(server=None, worker=SimpleNamespace(pid=4242))
    # Its live gauges are gone; its counters stay in the sum, so totals never go backwards.
    assert not live.exists() and kept.exists()
