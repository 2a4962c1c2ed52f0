"""/healthz and /readyz: no authentication, no audit, any Host header, and 503 naming what is down."""

import time

import pytest
from django.db import connection
from django.test import override_settings

from approvals.models import AuditRecord
from approvals.operations import probes as operations
from approvals.operations.publish import task_publish
from tests.operations.helpers import closed_port, unreachable_database
from tests.workers import PrivateRedis, publishing_to, start_worker, stop, wait_for

# Probes come by IP address, over plain HTTP, whatever ALLOWED_HOSTS and HTTPS say.
PROBE = {"HTTP_HOST": "10.1.2.3:8000"}


@pytest.fixture
def no_broker(settings):
    settings.CELERY_BROKER_URL = "memory://"


def test_healthz_answers_without_any_io_whatever_the_host(client):
    # No `db` fixture: pytest-django makes any database access here an error.
    response = client.get("/healthz", **PROBE)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"
    assert len(response["X-Request-ID"]) == 32


@override_settings(SECURE_SSL_REDIRECT=True, ALLOWED_HOSTS=["gateway.example"])
def test_probes_are_neither_redirected_to_https_nor_refused_for_their_host(client, db, no_broker):
    assert client.get("/healthz", **PROBE).status_code == 200
    assert client.get("/readyz", **PROBE).status_code == 200
    # Everything else still is: the exemption is for the probes only.
    assert client.get("/accounts/login/", **PROBE).status_code == 400
    assert client.get("/accounts/login/", HTTP_HOST="gateway.example").status_code == 301


def test_readyz_when_everything_answers(client, db, no_broker):
    response = client.get("/readyz", **PROBE)
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"database": "ok", "migrations": "ok"}}


def test_readyz_checks_redis_when_the_broker_is_redis(client, db, settings):
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    settings.CELERY_BROKER_URL = settings.REDIS_URL
    # Other tests leave messages in the shared Redis's queues: their age is tested on a Redis of its own below.
    settings.READYZ_QUEUE_AGE_MAX_SECONDS = 0
    response = client.get("/readyz", **PROBE)
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "migrations": "ok", "redis": "ok", "queues": "ok"}


def test_readyz_with_redis_down_is_503_naming_redis(client, db, settings):
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = client.get("/readyz", **PROBE)
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "checks": {"database": "ok", "migrations": "ok", "redis": "down", "queues": "unknown"},
        "down": ["redis"],
    }


@pytest.fixture
def private_broker(settings):
    """A Redis of the test's own as the broker, so that no other test's messages are in its queues."""
    broker = PrivateRedis()
    broker.start()
    settings.CELERY_BROKER_URL = broker.url
    try:
        with publishing_to(broker.url):
            yield broker
    finally:
        broker.stop()


@pytest.mark.redis
def test_readyz_reports_each_queue_and_answers_503_naming_a_stalled_one(client, db, settings, private_broker):
    settings.READYZ_QUEUE_AGE_MAX_SECONDS = 0.5
    # Published as the services publish (by name), with nobody consuming the deliveries queue.
    task_publish("approvals.deliver_agent_webhook", 1)
    task_publish("approvals.deliver_agent_webhook", 2)
    fresh = client.get("/readyz", **PROBE)
    assert fresh.status_code == 200, fresh.json()
    assert fresh.json()["queues"]["deliveries"]["waiting"] == 2
    assert fresh.json()["queues"]["executions"] == {"waiting": 0, "oldest_seconds": 0.0}

    assert wait_for(lambda: client.get("/readyz", **PROBE).status_code == 503, timeout=10)
    stalled = client.get("/readyz", **PROBE).json()
    assert stalled["status"] == "unavailable"
    assert stalled["checks"] == {"database": "ok", "migrations": "ok", "redis": "ok", "queues": "stalled"}
    assert stalled["down"] == ["queues"] and stalled["stalled"] == ["deliveries"]
    assert stalled["queues"]["deliveries"]["waiting"] == 2
    assert stalled["queues"]["deliveries"]["oldest_seconds"] > 0.5
    assert stalled["queues"]["executions"] == {"waiting": 0, "oldest_seconds": 0.0}
    assert stalled["queues"]["notifications"] == {"waiting": 0, "oldest_seconds": 0.0}

    # A worker of that queue drains it (the messages name no delivery row: each attempt finds none).
    worker = start_worker(private_broker.url, queues=["deliveries"])
    try:
        assert wait_for(lambda: client.get("/readyz", **PROBE).status_code == 200, timeout=60)
    finally:
        output = stop(worker)
    assert client.get("/readyz", **PROBE).json()["queues"]["deliveries"] == {"waiting": 0, "oldest_seconds": 0.0}, (
        output[-2000:]
    )


@pytest.mark.redis
def test_readyz_without_a_threshold_reports_the_queues_but_never_stalls(client, db, settings, private_broker):
    settings.READYZ_QUEUE_AGE_MAX_SECONDS = 0
    task_publish("approvals.notify_reviewers")
    time.sleep(0.2)
    response = client.get("/readyz", **PROBE)
    assert response.status_code == 200
    assert response.json()["checks"]["queues"] == "ok"
    assert response.json()["queues"]["notifications"]["waiting"] == 1
    assert response.json()["queues"]["notifications"]["oldest_seconds"] > 0


def test_readyz_with_the_database_down_is_503_naming_it_and_nothing_more(client, monkeypatch, no_broker):
    down = unreachable_database()
    monkeypatch.setattr(operations, "connections", {"default": down})
    response = client.get("/readyz", **PROBE)
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "checks": {"database": "down", "migrations": "unknown"},
        "down": ["database"],
    }
    # The driver's error (host, port, file name) stays in the log, not in the answer.
    body = response.content.decode()
    assert "nonexistent" not in body and "127.0.0.1" not in body and "refused" not in body.lower()
    down.close()


def test_readyz_with_a_migration_not_applied_is_503(client, db, no_broker):
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE app = 'approvals' AND name = (SELECT MAX(name) "
            "FROM django_migrations WHERE app = 'approvals')"
        )
    response = client.get("/readyz", **PROBE)
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "checks": {"database": "ok", "migrations": "down"},
        "down": ["migrations"],
    }


def test_probes_are_not_audited_and_need_no_credentials(client, db, no_broker):
    before = AuditRecord.objects.count()
    for path in ("/healthz", "/readyz"):
        assert client.get(path).status_code == 200
    assert AuditRecord.objects.count() == before


def test_probes_answer_only_reads(client, db):
    response = client.post("/healthz")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert client.head("/healthz").status_code == 200


def test_a_request_id_is_taken_when_sane_and_made_otherwise(client, db):
    assert client.get("/healthz", HTTP_X_REQUEST_ID="req-42.abc")["X-Request-ID"] == "req-42.abc"
    for hostile in ("x" * 129, "a b", "id\nInjected: yes", "<script>"):
        echoed = client.get("/healthz", HTTP_X_REQUEST_ID=hostile)["X-Request-ID"]
        assert echoed != hostile and len(echoed) == 32
    # Every answer carries it, errors included.
    response = client.get("/no-such-page/", HTTP_X_REQUEST_ID="req-404")
    assert response.status_code == 404 and response["X-Request-ID"] == "req-404"
