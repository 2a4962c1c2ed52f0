"""Probes and the metrics endpoint, answered by OperationsMiddleware before anything else runs: no
session, no authentication, no audit, no ALLOWED_HOSTS check and no HTTPS redirect (load balancers and
Prometheus come by IP address, often over plain HTTP inside the network).

- GET /healthz: liveness. The process answers; no I/O at all.
- GET /readyz: readiness. The database answers, every migration is applied, and Redis answers when the
  Celery broker is Redis. 503 with the name of each check that failed, and nothing more (why it
  failed goes to the log).
- GET /metrics: Prometheus text, for `Authorization: Bearer <METRICS_TOKEN>` only; without
  METRICS_TOKEN the endpoint does not exist (404).
"""

from __future__ import annotations

import logging
from functools import cache

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.http import HttpRequest, HttpResponse, JsonResponse

from . import metrics

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


def check_redis(url: str) -> bool:
    import redis

    client = redis.Redis.from_url(
        url, socket_connect_timeout=REDIS_TIMEOUT_SECONDS, socket_timeout=REDIS_TIMEOUT_SECONDS
    )
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - connection refused, timeout, auth: not ready either way
        logger.warning("Readiness: Redis does not answer", exc_info=True)
        return False
    finally:
        client.close()


def readiness() -> dict[str, str]:
    """Each check's name and `ok`, `down`, or `unknown` (not checked: what it needs is down)."""
    checks: dict[str, str] = {}
    database = check_database()
    checks["database"] = "ok" if database else "down"
    checks["migrations"] = ("ok" if check_migrations() else "down") if database else "unknown"
    broker = settings.CELERY_BROKER_URL or ""
    if broker.startswith(("redis://", "rediss://")):
        checks["redis"] = "ok" if check_redis(broker) else "down"
    return checks


def readyz(request: HttpRequest) -> HttpResponse:
    if request.method not in READ_METHODS:
        return _not_allowed()
    checks = readiness()
    ready = all(state == "ok" for state in checks.values())
    body: dict[str, object] = {"status": "ready" if ready else "unavailable", "checks": checks}
    if not ready:
        body["down"] = [name for name, state in checks.items() if state == "down"]
    return _uncached(JsonResponse(body, status=200 if ready else 503))


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
