"""Probes and the metrics endpoint, answered by OperationsMiddleware before anything else runs: no
session, no authentication, no audit, no ALLOWED_HOSTS check and no HTTPS redirect (load balancers and
Prometheus come by IP address, often over plain HTTP inside the network).

- GET /healthz: liveness. The process answers; no I/O at all.
- GET /readyz: readiness. The database answers, every migration is applied, and Redis answers when the
  Celery broker is Redis; then no Celery queue's oldest waiting message is older than
  READYZ_QUEUE_AGE_MAX_SECONDS (each queue's length and oldest age are in the body). 503 with the name
  of each check that failed (and of each stalled queue), and nothing more (why it failed goes to the log).
  With AUDIT_WITNESSES, the body also reports the audit log's witnesses (`audit_witnesses`, and
  `"degraded": ["audit_witnesses"]` when one refuses or does not answer, or publication lags), but they
  never make it 503: a witness that is down must not take the web processes, and money, with it.
- GET /metrics: Prometheus text, for `Authorization: Bearer <METRICS_TOKEN>` only; without
  METRICS_TOKEN the endpoint does not exist (404).
"""

from __future__ import annotations

import json
import logging
import time
from functools import cache
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.http import HttpRequest, HttpResponse, JsonResponse

from approvals.operations import metrics

logger = logging.getLogger(__name__)

READ_METHODS = ("GET", "HEAD")
REDIS_TIMEOUT_SECONDS = 2.0


def _not_allowed() -> JsonResponse:
    response = JsonResponse({"error": {"code": "method_not_allowed", "message": "Use GET."}}, status=405)
    response["Allow"] = ", ".join(READ_METHODS)
    return response


def _uncached(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "no-store"
    return response


def healthz(request: HttpRequest) -> HttpResponse:
    if request.method not in READ_METHODS:
        return _not_allowed()
    return _uncached(JsonResponse({"status": "ok"}))


# Readiness ----------------------------------------------------------------------------------------


@cache
def _latest_migrations() -> frozenset[tuple[str, str]]:
    """The last migration of each app, as on disk (read once: the code does not change under a process)."""
    return frozenset(MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes())


def check_database() -> bool:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)
    except Exception:  # noqa: BLE001 - whatever the driver raises, the database is not usable
        logger.warning("Readiness: the database does not answer", exc_info=True)
        return False


def check_migrations() -> bool:
    try:
        applied = MigrationRecorder(connections[DEFAULT_DB_ALIAS]).applied_migrations()
    except Exception:  # noqa: BLE001
        logger.warning("Readiness: could not read the applied migrations", exc_info=True)
        return False
    missing = _latest_migrations() - set(applied)
    if missing:
        logger.warning("Readiness: migrations not applied: %s", ", ".join(f"{a}.{n}" for a, n in sorted(missing)))
    return not missing


def _redis_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_SECONDS, socket_timeout=REDIS_TIMEOUT_SECONDS)


def check_redis(url: str) -> bool:
    client = _redis_client(url)
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - connection refused, timeout, auth: not ready either way
        logger.warning("Readiness: Redis does not answer", exc_info=True)
        return False
    finally:
        client.close()


def celery_queues() -> list[str]:
    """Every queue a task is routed to, and the default one."""
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    return sorted(routed | {settings.CELERY_TASK_DEFAULT_QUEUE})


def _published_at(message: bytes | None) -> float | None:
    if message is None:
        return None
    try:
        stamp = json.loads(message)["headers"]["published_at"]
    except (ValueError, KeyError, TypeError):
        return None  # published without the stamp (before it existed): its age is unknown
    return float(stamp) if isinstance(stamp, int | float) else None


def queue_backlog(url: str) -> dict[str, dict[str, float]] | None:
    """Per queue on the Redis broker: how many messages wait for a worker and the age in seconds of the
    oldest (0 when none); None when Redis does not answer. kombu pushes on the left and workers pop on
    the right, so the oldest waiting message is the list's last element."""
    queues = celery_queues()
    client = _redis_client(url)
    try:
        pipeline = client.pipeline(transaction=False)
        for queue in queues:
            pipeline.llen(queue)
            pipeline.lindex(queue, -1)
        replies = pipeline.execute()
    except Exception:  # noqa: BLE001 - as check_redis
        logger.warning("Readiness: could not read the Celery queues", exc_info=True)
        return None
    finally:
        client.close()
    now = time.time()
    backlog: dict[str, dict[str, float]] = {}
    for index, queue in enumerate(queues):
        waiting, oldest = replies[2 * index], _published_at(replies[2 * index + 1])
        age = max(0.0, now - oldest) if oldest is not None else 0.0
        backlog[queue] = {"waiting": int(waiting), "oldest_seconds": round(age, 1)}
    return backlog


def readiness() -> tuple[dict[str, str], dict[str, dict[str, float]] | None]:
    """Each check's name and `ok`, `down`, `stalled` (a queue's oldest message is too old) or `unknown`
    (not checked: what it needs is down); and the Celery queues' backlog when the broker is Redis."""
    checks: dict[str, str] = {}
    database = check_database()
    checks["database"] = "ok" if database else "down"
    checks["migrations"] = ("ok" if check_migrations() else "down") if database else "unknown"
    broker = settings.CELERY_BROKER_URL or ""
    backlog = None
    if broker.startswith(("redis://", "rediss://")):
        redis_up = check_redis(broker)
        checks["redis"] = "ok" if redis_up else "down"
        backlog = queue_backlog(broker) if redis_up else None
        checks["queues"] = "unknown" if backlog is None else "stalled" if stalled_queues(backlog) else "ok"
    return checks, backlog


def stalled_queues(backlog: dict[str, dict[str, float]]) -> list[str]:
    limit = float(settings.READYZ_QUEUE_AGE_MAX_SECONDS)
    if limit <= 0:
        return []
    return [queue for queue, state in backlog.items() if state["oldest_seconds"] > limit]


def readyz(request: HttpRequest) -> HttpResponse:
    if request.method not in READ_METHODS:
        return _not_allowed()
    checks, backlog = readiness()
    ready = all(state == "ok" for state in checks.values())
    body: dict[str, object] = {"status": "ready" if ready else "unavailable", "checks": checks}
    if backlog is not None:
        body["queues"] = backlog
    if not ready:
        body["down"] = [name for name, state in checks.items() if state in ("down", "stalled")]
    if backlog is not None and (stalled := stalled_queues(backlog)):
        body["stalled"] = stalled
        logger.warning("Readiness: Celery queues stalled: %s", ", ".join(stalled))
    if checks["database"] == "ok" and (witnesses := audit_witnesses()) is not None:
        body["audit_witnesses"] = witnesses
        if witnesses["status"] != "ok":
            body["degraded"] = ["audit_witnesses"]
    return _uncached(JsonResponse(body, status=200 if ready else 503))


def audit_witnesses() -> dict[str, Any] | None:
    """The audit witnesses' report (metrics.witnesses_report), or `unknown` when it could not be read."""
    try:
        return metrics.witnesses_report()
    except Exception:  # noqa: BLE001 - reported, never a reason to fail readiness
        logger.warning("Readiness: could not read the audit witnesses", exc_info=True)
        return {"status": "unknown"}


# Metrics ------------------------------------------------------------------------------------------


def metrics_endpoint(request: HttpRequest) -> HttpResponse:
    token = settings.METRICS_TOKEN
    if not token:
        return JsonResponse({"error": {"code": "not_found", "message": "Not found."}}, status=404)
    if request.method not in READ_METHODS:
        return _not_allowed()
    allowed = metrics.authorized(request.headers.get("Authorization"), token)
    if not allowed:
        response = JsonResponse(
            {
                "error": {
                    "code": "not_authenticated" if allowed is None else "invalid_token",
                    "message": "Send Authorization: Bearer <METRICS_TOKEN>.",
                }
            },
            status=401 if allowed is None else 403,
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return _uncached(HttpResponse(metrics.exposition(), content_type=metrics.CONTENT_TYPE))


# Path → (the view label in the request metrics, the view).
ENDPOINTS = {"/healthz": ("healthz", healthz), "/readyz": ("readyz", readyz), "/metrics": ("metrics", metrics_endpoint)}
