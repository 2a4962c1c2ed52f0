"""The sealer as production runs it: `manage.py seal_audit --loop`, two of them started by mistake. Every
committed record is sealed exactly once, each head is published to the checkpoint file, and TERM stops
both cleanly."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.db import transaction

from approvals.core.services import audit_record
from approvals.models import AuditEvent, AuditLeaf, AuditRecord, AuditTreeHead
from tests import workers

pytestmark = pytest.mark.postgres


def _sealer(checkpoints):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": workers.test_database_url(),
        "AUDIT_SIGNING_KEY": settings.AUDIT_SIGNING_KEY,
        "AUDIT_CHECKPOINT_FILE": str(checkpoints),
        # The publication is an outbox message delivered by a deliveries worker; here, as in `make run`,
        # in the sealer's own process right after its seal commits.
        "CELERY_TASK_ALWAYS_EAGER": "true",
    }
    argv = [sys.executable, "manage.py", "seal_audit", "--loop", "--interval", "0.1"]
    return subprocess.Popen(
        argv, cwd=workers.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_two_sealer_processes_seal_each_committed_record_once_and_publish_every_head(transactional_db, tmp_path):
    from tests.factories import UserFactory

    alice = UserFactory(username="alice")
    checkpoints = tmp_path / "heads.jsonl"
    sealers = [_sealer(checkpoints), _sealer(checkpoints)]
    for sealer in sealers:  # up, with their TERM handlers in place
        assert sealer.stdout.readline().startswith("Sealing committed audit records every 0.1 s")
    try:
        for n in range(30):
            with transaction.atomic():
                audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"n": n})
                if n % 3 == 0:
                    audit_record(event=AuditEvent.CONFIRMED, actor=alice, result={"n": n})
            time.sleep(0.02)
        deadline = time.monotonic() + 60
        while AuditLeaf.objects.count() < AuditRecord.objects.count() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for sealer in sealers:
            sealer.send_signal(signal.SIGTERM)
        outputs = [sealer.communicate(timeout=30)[0] for sealer in sealers]

    assert [sealer.returncode for sealer in sealers] == [0, 0], outputs
    assert AuditRecord.objects.count() == 40
    assert AuditLeaf.objects.count() == 40
    assert AuditLeaf.objects.values("record_id").distinct().count() == 40
    assert list(AuditLeaf.objects.order_by("index").values_list("index", flat=True)) == list(range(40))
    published = [json.loads(line) for line in checkpoints.read_text().splitlines()]
    assert published == [head.as_checkpoint() for head in AuditTreeHead.objects.order_by("size")]
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("verify_audit", "--checkpoints", str(checkpoints), stdout=out)
    assert f"40 records sealed under {len(published)} signed tree heads" in out.getvalue()
