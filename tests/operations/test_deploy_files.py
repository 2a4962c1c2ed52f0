"""The production run files: the alert rules pass promtool, and every unit and Procfile line runs the
commands the README documents."""

import configparser
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"


# .ci/run installs promtool, so in CI a missing one fails; elsewhere the test is skipped without it.
@pytest.mark.skipif(
    shutil.which("promtool") is None and os.environ.get("CI") != "true",
    reason="promtool is not installed (Debian: prometheus; .ci/run installs it)",
)
def test_the_alert_rules_pass_promtool_and_their_unit_tests():
    check = subprocess.run(
        ["promtool", "check", "rules", "alerts.yml"], cwd=PROMETHEUS, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run(
        ["promtool", "test", "rules", "alerts_test.yml"], cwd=PROMETHEUS, capture_output=True, text=True, timeout=60
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr


def unit(name: str) -> configparser.ConfigParser:
    # strict=False: systemd repeats keys (Environment=); the parser keeps the last, checked as text below.
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(ROOT / "deploy" / "systemd" / name)
    return parser


QUEUES = ("executions", "deliveries", "notifications")


def test_the_systemd_units_run_the_documented_commands_and_stop_gracefully():
    web, beat = unit("gateway-web.service"), unit("gateway-beat.service")
    workers = {queue: unit(f"gateway-worker-{queue}.service") for queue in QUEUES}
    assert web["Service"]["ExecStart"].endswith("gunicorn -c config/gunicorn.conf.py config.wsgi:application")
    assert "celery -A config beat" in beat["Service"]["ExecStart"]
    sealer = unit("gateway-sealer.service")
    assert sealer["Service"]["ExecStart"].endswith("manage.py seal_audit --loop")
    for queue, worker in workers.items():
        # One pool per queue, so a slow webhook receiver never holds the executions' processes.
        assert f"celery -A config worker -Q {queue} " in worker["Service"]["ExecStart"]
        # Longer than a task may run (CELERY_TASK_TIME_LIMIT), so that a warm shutdown lets it finish.
        assert int(worker["Service"]["TimeoutStopSec"]) > 300
    assert len({worker["Service"]["ExecStart"].split("-n ")[1].split()[0] for worker in workers.values()}) == 3
    for service in (web, beat, sealer, *workers.values()):
        assert service["Service"]["KillSignal"] == "SIGTERM"
        assert service["Service"]["EnvironmentFile"] == "/etc/approval-gateway/env"
    # Each multiprocess metrics directory is the unit's own runtime directory, fresh at every start, and
    # each worker's exporter has a port of its own (they may share a machine).
    for name in ("web", *(f"worker-{queue}" for queue in QUEUES)):
        text = (ROOT / "deploy" / "systemd" / f"gateway-{name}.service").read_text()
        assert f"\nEnvironment=PROMETHEUS_MULTIPROC_DIR=/run/approval-gateway-{name}\n" in text
        assert f"\nRuntimeDirectory=approval-gateway-{name}\n" in text
    ports = {
        line.split("=", 2)[2]
        for queue in QUEUES
        for line in (ROOT / "deploy" / "systemd" / f"gateway-worker-{queue}.service").read_text().splitlines()
        if line.startswith("Environment=CELERY_METRICS_PORT=")
    }
    assert len(ports) == 3


def test_the_procfile_names_web_a_worker_per_queue_beat_and_the_sealer():
    lines = dict(
        line.split(": ", 1)
        for line in (ROOT / "Procfile").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert set(lines) == {"release", "web", *QUEUES, "beat", "sealer"}
    assert lines["sealer"].endswith("manage.py seal_audit --loop")
    assert "gunicorn -c config/gunicorn.conf.py config.wsgi:application" in lines["web"]
    assert "celery -A config beat" in lines["beat"]
    assert "approval-gateway-metrics-web" in lines["web"]
    for queue in QUEUES:
        assert f"celery -A config worker -Q {queue} " in lines[queue]
        assert f"approval-gateway-metrics-{queue}" in lines[queue]


def test_every_queue_a_task_is_routed_to_has_a_worker_pool():
    from django.conf import settings

    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()} | {settings.CELERY_TASK_DEFAULT_QUEUE}
    assert routed == set(QUEUES)
