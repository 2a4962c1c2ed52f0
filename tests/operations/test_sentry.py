"""Sentry: off and harmless without SENTRY_DSN; with one, its events are scrubbed like the logs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import sentry_sdk
from django.conf import settings

from config.sentry import scrub_event

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_dsn_sentry_is_off_and_requests_work(client, db):
    assert settings.SENTRY_DSN == ""
    assert not sentry_sdk.get_client().is_active()
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code in (200, 503)
    # Capturing without a client sends nothing and raises nothing.
    assert sentry_sdk.capture_message("nothing to send") is None


def test_events_are_scrubbed_before_they_are_sent():
    event = {
        "exception": {"values": [{"type": "ValueError", "value": "token agt_SECRETSECRET1234 refused"}]},
        "request": {
            "headers": {"Authorization": "Bearer agt_SECRETSECRET1234", "Cookie": "sessionid=abc"},
            "data": {"password": "hunter22", "amount_minor": 500},
        },
        "breadcrumbs": {"values": [{"message": "card 4242424242424242 declined"}]},
    }
    scrubbed = json.dumps(scrub_event(event, {}))
    for secret in ("SECRETSECRET", "hunter22", "sessionid=abc", "4242424242424242"):
        assert secret not in scrubbed
    assert '"amount_minor": 500' in scrubbed and "[card \\u20264242]" in scrubbed


SCRIPT = """
import json, django, sentry_sdk
django.setup()
from django.conf import settings
from config.sentry import sentry_init
sent = []
class Capture(sentry_sdk.transport.Transport):
    def capture_envelope(self, envelope):
        sent.extend(item.payload.json for item in envelope.items if item.payload.json)
client = sentry_sdk.get_client()
integrations = sorted(client.integrations)
sentry_init(dsn=settings.SENTRY_DSN, transport=Capture)
try:
    raise RuntimeError("worker failed with token agt_SECRETSECRET1234 and password=hunter22")
except RuntimeError as error:
    sentry_sdk.capture_exception(error)
sentry_sdk.flush()
print(json.dumps({"integrations": integrations, "pii": client.options["send_default_pii"], "events": sent}))
"""


def test_with_a_dsn_django_and_celery_are_integrated_and_events_scrubbed():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "SENTRY_DSN": "http://key@127.0.0.1:9/1",
        "DATABASE_URL": "sqlite:///:memory:",
        "REDIS_URL": "",
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"django", "celery"} <= set(report["integrations"])
    assert report["pii"] is False
    (event,) = report["events"]
    text = json.dumps(event)
    assert "SECRETSECRET" not in text and "hunter22" not in text
    assert "agt_[redacted]" in event["exception"]["values"][0]["value"]
