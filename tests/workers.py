"""Real Celery worker processes and private Redis servers for the fault tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import kombu.pools
from django.db import connection

from config.celery import app as celery_app

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from approvals.models import Preview
    from tests.refunds.fake_stripe import FakeStripe

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    """The test database, as a URL a worker process can use."""
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def all_queues() -> list[str]:
    """Every queue a task is routed to (settings.CELERY_QUEUES_BY_KIND), and the default one."""
    from django.conf import settings

    routed = {route["queue"] for route in getattr(settings, "CELERY_TASK_ROUTES", {}).values()}
    return sorted(routed | {getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")})


def start_worker(
    redis_url: str,
    *extra_env: tuple[str, str],
    name: str = "w1",
    queues: list[str] | None = None,
    concurrency: int = 1,
) -> subprocess.Popen:
    """A worker consuming `queues` (by default all of them, as one process): the solo pool, or the
    production prefork pool with `concurrency` processes."""
    pool = ["--pool=solo"] if concurrency == 1 else ["--pool=prefork", f"--concurrency={concurrency}"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": test_database_url(),
        "REDIS_URL": redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        **dict(extra_env),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            *pool,
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            f"{name}@%h",
            "-Q",
            ",".join(queues or all_queues()),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def stop(process: subprocess.Popen) -> str:
    if process.poll() is None:
        process.terminate()
    try:
        output, _ = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    return output or ""


def stop_now(process: subprocess.Popen[str]) -> str:
    """Celery's cold shutdown (QUIT: running tasks are abandoned, and delivered again later), then the
    whole process group, pool processes included, if it has not gone."""
    if process.poll() is None:
        process.send_signal(signal.SIGQUIT)
    try:
        output, _ = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
    return output or ""


def wait_for(predicate: Callable[[], object], timeout: float = 60.0, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


class PrivateRedis:
    """A redis-server of the test's own on a free port, which the test may stop and start again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert wait_for(self._answers, timeout=10), "redis-server did not start"

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False


def _reset_producer_connections() -> None:
    # Kombu keeps connection pools per broker URL, process-wide; drop them all so the next
    # publish connects afresh to whichever broker is configured now.
    kombu.pools.reset()
    celery_app._pool = None  # type: ignore[attr-defined]  # Celery's private pool, not in celery-types
    celery_app.amqp._producer_pool = None  # type: ignore[attr-defined]  # the same, kept by its AMQP


@contextmanager
def publishing_to(broker_url: str) -> Iterator[None]:
    """Make this process publish tasks to `broker_url` (not eagerly) for the duration."""
    old_url, old_eager = celery_app.conf.broker_url, celery_app.conf.task_always_eager
    # An item, not an attribute: celery-types has broker_url as a read-only property; Celery sets both alike.
    celery_app.conf["broker_url"] = broker_url
    celery_app.conf["task_always_eager"] = False
    _reset_producer_connections()
    try:
        yield
    finally:
        celery_app.conf["broker_url"] = old_url
        celery_app.conf["task_always_eager"] = old_eager
        _reset_producer_connections()


def proposed_stripe_refund() -> tuple[FakeStripe, User, Preview, tuple[tuple[str, str], ...]]:
    """Alice's o-12 (EUR 10.00, paid through `pi_o12` at a fresh Stripe-compatible server) with a
    proposed refund of 5.00: (the server, alice, the preview, the worker settings pointing at it)."""
    from approvals.models import Preview
    from tests.conftest import agent_client_for, propose
    from tests.factories import OrderFactory, UserFactory
    from tests.refunds.fake_stripe import FakeStripe

    fake = FakeStripe().start()
    fake.add_payment_intent("pi_o12", amount=1000, currency="eur")
    alice = UserFactory.create(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000, payment_ref="pi_o12")
    body = propose(agent_client_for(alice), order_id="o-12", amount_minor=500, reason="damaged").json()
    preview = Preview.objects.get(pk=body["preview"]["id"])
    stripe_env = (("PAYMENT_GATEWAY", "stripe"), ("STRIPE_API_KEY", "sk_test_x"), ("STRIPE_API_BASE", fake.url))
    return fake, alice, preview, stripe_env
