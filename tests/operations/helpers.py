"""Scraping /metrics in tests, and a database or Redis that does not answer."""

from __future__ import annotations

import copy
import socket

from django.db import connections
from django.db.utils import load_backend
from prometheus_client.parser import text_string_to_metric_families

METRICS_TOKEN = "metrics-test-token-0123456789"


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unreachable_database():
    """A connection like the test database's, but to somewhere nothing answers."""
    settings_dict = copy.deepcopy(connections["default"].settings_dict)
    if settings_dict["ENGINE"] == "django.db.backends.sqlite3":
        settings_dict["NAME"] = "/nonexistent-directory/gateway.sqlite3"
    else:
        settings_dict.update(HOST="127.0.0.1", PORT=str(closed_port()))
        settings_dict.setdefault("OPTIONS", {})["connect_timeout"] = 2
    return load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, "default")


def scrape(client) -> str:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return response.content.decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of the exposition, by (sample name, its labels)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(parsed: dict, name: str, **labels: str) -> float:
    return parsed.get((name, frozenset(labels.items())), 0.0)
