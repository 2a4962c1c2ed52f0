"""The short fault campaign: every fault once (PostgreSQL killed and failed over, Redis killed, a worker
of each queue and the sealer killed, the provider's network slow, reset and black-holed, the mail server
dropping after DATA) against a stack of its own, then every invariant (chaos/campaign.py). It runs on
PostgreSQL machines (Debian's initdb/pg_ctl and redis-server), as `make test` does there."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.stack import PG_BIN

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.chaos]

ROOT = Path(__file__).resolve().parent.parent.parent
CAMPAIGN_TIMEOUT_SECONDS = 420


def test_the_short_campaign_keeps_every_invariant():
    if not (PG_BIN / "initdb").exists() or not shutil.which("redis-server"):
        pytest.skip(f"needs {PG_BIN}/initdb and redis-server")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL"))}
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "--short", "--seed", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CAMPAIGN_TIMEOUT_SECONDS,
    )
    report = done.stdout + done.stderr[-4000:]
    assert "| fault | times |" in done.stdout, report
    assert done.returncode == 0, report
    assert "every invariant holds" in done.stdout
    for fault in ("postgres_kill", "postgres_failover", "redis_kill", "provider_blackhole", "smtp_drop_after_data"):
        assert f"| {fault} | 1 |" in done.stdout, report
