"""The fault campaign: traffic through the whole stack while faults are injected at random points, then
the invariants. Every loop here is bounded in count and in time; all traffic goes to 127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from chaos.proxy import FaultProxy
from chaos.smtp import SmtpPeer
from chaos.stack import ROOT, PgCluster, Processes, Redis, celery, free_port, manage, wait_for

PASSWORD = "chaos-pass-not-a-secret"
QUEUES = ("executions", "deliveries", "notifications")
FAULTS = (
    "postgres_kill",
    "postgres_failover",
    "redis_kill",
    "worker_kill_executions",
    "worker_kill_deliveries",
    "worker_kill_notifications",
    "sealer_kill",
    "provider_latency",
    "provider_reset",
    "provider_blackhole",
    "smtp_drop_after_data",
)
HTTP_TIMEOUT = 15.0


@dataclass
class Plan:
    rounds: int  # each fault this many times (the failover once: it uses the standby up)
    customers: int
    proposals_each: int
    fault_seconds: float  # how long a network or mail fault lasts
    traffic_seconds: float
    settle_seconds: float
    seed: int

    @classmethod
    def short(cls, seed: int = 1) -> Plan:
        return cls(
            rounds=1,
            customers=3,
            proposals_each=40,
            fault_seconds=3.0,
            traffic_seconds=75.0,
            settle_seconds=100.0,
            seed=seed,
        )

    @classmethod
    def full(cls, seed: int = 1) -> Plan:
        return cls(
            rounds=3,
            customers=6,
            proposals_each=150,
            fault_seconds=8.0,
            traffic_seconds=420.0,
            settle_seconds=240.0,
            seed=seed,
        )


@dataclass
class Injection:
    fault: str
    started: float
    healed: float = 0.0
    recovered: float | None = None  # seconds from healed until the gateway answered again


@dataclass
class Traffic:
    lock: threading.Lock = field(default_factory=threading.Lock)
    proposed: dict[str, float] = field(default_factory=dict)  # preview id -> when
    told: list[tuple[str, str]] = field(default_factory=list)  # (preview id, role) a person was told
    statuses: list[int] = field(default_factory=list)


class Hooks:
    """The agents' webhook endpoint and the checkpoint webhook's, recording what they are sent."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    data = json.loads(body)
                except ValueError:
                    data = {}
                with hooks.lock:
                    hooks.messages.append({"path": self.path, "id": self.headers.get("webhook-id"), "body": data})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Campaign:
    def __init__(self, plan: Plan, out: Callable[[str], None] = print) -> None:
        self.plan, self.out = plan, out
        self.rng = random.Random(plan.seed)
        self.work = Path(tempfile.mkdtemp(prefix="chaos-"))
        self.cluster = PgCluster()
        self.redis = Redis()
        self.smtp = SmtpPeer()
        self.hooks = Hooks()
        self.injections: list[Injection] = []
        self.traffic = Traffic()
        self.web_port = free_port()
        self.base = f"http://127.0.0.1:{self.web_port}"
        self.stripe: Any = None
        self.proxy: FaultProxy | None = None
        self.processes: Processes | None = None
        self.probe_url = ""

    # The stack --------------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

        key = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        assert self.proxy is not None
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_", "DEMO"))},
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PYTHONPATH": str(ROOT),
            "SECRET_KEY": base64.b64encode(os.urandom(48)).decode(),
            "DEBUG": "false",
            "SECURE_SSL_REDIRECT": "false",
            "SESSION_COOKIE_SECURE": "false",
            "CSRF_COOKIE_SECURE": "false",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "PUBLIC_BASE_URL": self.base,
            "DATABASE_URL": self.cluster.database_url(),
            "DATABASE_CONN_MAX_AGE": "0",
            "REDIS_URL": self.redis.url,
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "PAYMENT_GATEWAY": "stripe",
            "STRIPE_API_KEY": "sk_test_x",
            "STRIPE_API_BASE": self.proxy.url,
            "STRIPE_TIMEOUT_SECONDS": "2",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(self.smtp.port),
            "EMAIL_TIMEOUT": "3",
            "AUDIT_SIGNING_KEY": base64.b64encode(key).decode(),
            "AUDIT_CHECKPOINT_FILE": str(self.work / "checkpoints.jsonl"),
            "AUDIT_CHECKPOINT_WEBHOOKS": f"http://127.0.0.1:{self.hooks.port}/checkpoints",
            "AUDIT_CHECKPOINT_WEBHOOK_SECRET": "whsec_" + base64.b64encode(b"chaos-checkpoint-secret!").decode(),
            "AGENT_WEBHOOK_ALLOW_PRIVATE": "true",
            "AGENT_WEBHOOK_BACKOFF_SECONDS": "1",
            "AGENT_WEBHOOK_DEADLINE_SECONDS": "3",
            "STAFF_REVIEW_THRESHOLDS": "EUR:300",
            "REVIEW_NOTIFY_INTERVAL_SECONDS": "5",
            "REVIEW_NOTIFY_BATCH_SECONDS": "2",
            "OUTBOX_GRACE_SECONDS": "3",
            "OUTBOX_SWEEP_INTERVAL_SECONDS": "2",
            "EXECUTION_STALL_SECONDS": "8",
            "EXECUTION_LEASE_SECONDS": "15",
            "EXECUTION_RESOLVE_INTERVAL_SECONDS": "5",
            "LOGIN_FAILURE_LIMIT": "1000000",
            "CELERY_VISIBILITY_TIMEOUT": "30",
            "LOG_LEVEL": "WARNING",
        }

    def start(self) -> None:
        from tests.refunds.fake_stripe import FakeStripe

        self.cluster.create()
        self.redis.start()
        self.stripe = FakeStripe().start()
        port = int(self.stripe.url.rsplit(":", 1)[1])
        self.proxy = FaultProxy("127.0.0.1", port).start()
        self.smtp.start()
        env = self.env()
        os.environ.update(env)
        subprocess.run(manage("migrate", "--no-input", "-v", "0"), env=env, cwd=ROOT, check=True, timeout=600)
        self.cluster.standby_add()  # after the schema: the migrations do not wait for a standby
        import django

        django.setup()
        self.seed()
        self.processes = processes = Processes(env, self.work)
        processes.start(
            "web",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi",
                "-b",
                f"127.0.0.1:{self.web_port}",
                "-w",
                "2",
                "--threads",
                "4",
                "--timeout",
                "60",
                "--graceful-timeout",
                "5",
            ],
        )
        for queue in QUEUES:
            processes.start(
                f"worker_{queue}",
                celery(
                    "worker",
                    "--pool=solo",
                    "--loglevel=WARNING",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-n",
                    f"{queue}@chaos",
                    "-Q",
                    queue,
                ),
            )
        processes.start("beat", celery("beat", "--loglevel=WARNING", "-s", str(self.work / "beat-schedule")))
        processes.start("sealer", manage("seal_audit", "--loop"))
        assert wait_for(lambda: _get(f"{self.base}/healthz") == 200, timeout=60), "gunicorn did not start"

    def seed(self) -> None:
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group

        from approvals.core.services import agent_session_create
        from approvals.models import AgentSession
        from refunds.models import Order, OrderStatus
        from refunds.permissions import REFUND_REVIEWERS

        users = get_user_model()
        today = date.today()
        staff = users.objects.create_user("chaos-staff", email="staff@chaos.test", password=PASSWORD, is_staff=True)
        staff.groups.add(Group.objects.get(name=REFUND_REVIEWERS))
        self.customers: list[dict[str, Any]] = []
        for c in range(self.plan.customers):
            person = users.objects.create_user(f"chaos{c}", email=f"chaos{c}@chaos.test", password=PASSWORD)
            numbers = []
            for o in range(self.plan.proposals_each // 2 + 1):
                number = f"C{c}-{o}"
                Order.objects.create(
                    number=number,
                    customer=person,
                    currency="EUR",
                    total_minor=1000,
                    payment_ref=f"pi_{number}",
                    status=OrderStatus.DELIVERED,
                    placed_at=today - timedelta(days=3),
                    delivered_at=today - timedelta(days=1),
                )
                self.stripe.add_payment_intent(f"pi_{number}", amount=1000, currency="eur")
                numbers.append(number)
            session, token = agent_session_create(user=person, tools=["refund_order"])
            AgentSession.objects.filter(pk=session.pk).update(
                webhook_url=f"http://127.0.0.1:{self.hooks.port}/agents/{c}",
                webhook_secret="whsec_" + base64.b64encode(os.urandom(24)).decode(),
            )
            self.customers.append({"username": person.get_username(), "token": token, "orders": numbers})

    def stop(self) -> None:
        if self.processes is not None:
            self.processes.stop_all()
        for stopper in (
            self.smtp.stop,
            self.hooks.stop,
            self.redis.kill,
            self._proxy_stop,
            self._stripe_stop,
            self.cluster.stop,
        ):
            try:
                stopper()
            except Exception:  # noqa: BLE001 - the rest is stopped all the same
                pass

    def _proxy_stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()

    def _stripe_stop(self) -> None:
        if self.stripe is not None:
            self.stripe.stop()

    # Traffic ----------------------------------------------------------------------------------------

    def customer_run(self, index: int, deadline: float) -> None:
        import requests

        me = self.customers[index]
        rng = random.Random(self.plan.seed * 1000 + index)
        agent = requests.Session()
        agent.headers["Authorization"] = f"Bearer {me['token']}"
        browser = requests.Session()
        logged_in = False
        pace = self.plan.traffic_seconds / self.plan.proposals_each  # spread over the whole window
        next_at = time.monotonic()
        for n in range(self.plan.proposals_each):
            time.sleep(max(0.0, min(next_at - time.monotonic(), deadline - time.monotonic())))
            if time.monotonic() > deadline:
                return
            next_at = time.monotonic() + rng.uniform(0.5, 1.5) * pace
            try:
                if not logged_in:
                    logged_in = _login(browser, self.base, me["username"])
                order = rng.choice(me["orders"])
                body: dict[str, Any] = {
                    "name": "refund_order",
                    "arguments": {
                        "order_id": order,
                        "amount_minor": rng.choice([100, 150, 200, 350]),
                        "reason": "damaged",
                    },
                }
                answer = None
                for _attempt in range(3):  # an agent retries with the same key: one preview
                    answer = agent.post(
                        f"{self.base}/api/agent/tool-calls",
                        json=body,
                        headers={"Idempotency-Key": f"{me['username']}-{n}"},
                        timeout=HTTP_TIMEOUT,
                    )
                    if answer.status_code < 500:
                        break
                    time.sleep(0.5)
                assert answer is not None
                with self.traffic.lock:
                    self.traffic.statuses.append(answer.status_code)
                if answer.status_code not in (200, 201):
                    continue
                preview = answer.json()["preview"]
                with self.traffic.lock:
                    self.traffic.proposed.setdefault(preview["id"], time.monotonic())
                    self.probe_url = f"{self.base}/api/agent/previews/{preview['id']}"
                    self.probe_token = me["token"]
                if not logged_in or preview.get("status") != "awaiting_customer":
                    continue
                page = browser.get(preview["confirm_url"], timeout=HTTP_TIMEOUT)
                digest = re.search(r'name="digest" value="([0-9a-f]{64})"', page.text)
                if digest is None:
                    continue
                response = browser.post(
                    f"{self.base}/previews/{preview['id']}/confirm",
                    data={"digest": digest.group(1), "csrfmiddlewaretoken": browser.cookies.get("csrftoken", "")},
                    headers={"Referer": preview["confirm_url"]},
                    timeout=HTTP_TIMEOUT,
                    allow_redirects=False,
                )
                if response.status_code in (302, 303):
                    with self.traffic.lock:
                        self.traffic.told.append((preview["id"], "customer"))
            except requests.RequestException:
                logged_in = False

    def staff_run(self, deadline: float) -> None:
        import requests

        browser = requests.Session()
        logged_in = False
        decided: set[str] = set()
        while time.monotonic() < deadline:
            time.sleep(1.0)
            try:
                if not logged_in:
                    logged_in = _login(browser, self.base, "chaos-staff")
                waiting = self.awaiting_staff()
                for preview_id, digest in waiting[:5]:
                    if preview_id in decided:
                        continue
                    page = f"{self.base}/console/previews/{preview_id}"
                    browser.get(page, timeout=HTTP_TIMEOUT)
                    response = browser.post(
                        f"{page}/approve",
                        data={"digest": digest, "csrfmiddlewaretoken": browser.cookies.get("csrftoken", "")},
                        headers={"Referer": page},
                        timeout=HTTP_TIMEOUT,
                        allow_redirects=False,
                    )
                    if response.status_code in (302, 303):
                        decided.add(preview_id)
                        with self.traffic.lock:
                            self.traffic.told.append((preview_id, "staff"))
            except requests.RequestException:
                logged_in = False
            except Exception:  # noqa: BLE001 - the database is down or failing over: try again
                _db_reset()

    def awaiting_staff(self) -> list[tuple[str, str]]:
        from approvals.models import Preview, PreviewStatus

        _db_reset()
        rows = Preview.objects.filter(status=PreviewStatus.AWAITING_STAFF).values_list("pk", "digest")[:20]
        return [(str(pk), digest) for pk, digest in rows]

    # Faults -----------------------------------------------------------------------------------------

    def schedule(self) -> list[str]:
        faults = [fault for _ in range(self.plan.rounds) for fault in FAULTS if fault != "postgres_failover"]
        self.rng.shuffle(faults)
        faults.insert(self.rng.randrange(len(faults) + 1), "postgres_failover")
        return faults

    def inject(self, fault: str) -> None:
        assert self.processes is not None and self.proxy is not None
        seconds = self.plan.fault_seconds
        if fault == "postgres_kill":
            self.cluster.primary.kill()
            time.sleep(self.rng.uniform(0.5, 2.0))
            self.cluster.primary.start()
        elif fault == "postgres_failover":
            self.cluster.failover()
        elif fault == "redis_kill":
            self.redis.kill()
            time.sleep(self.rng.uniform(0.5, 2.0))
            self.redis.start()
        elif fault.startswith("worker_kill_"):
            name = "worker_" + fault.removeprefix("worker_kill_")
            self.processes.kill(name)
            time.sleep(self.rng.uniform(0.2, 1.0))
            self.processes.restart(name)
        elif fault == "sealer_kill":
            self.processes.kill("sealer")
            self.processes.restart("sealer")
        elif fault.startswith("provider_"):
            mode = fault.removeprefix("provider_")
            self.proxy.set(mode, latency=1.5 if mode == "latency" else 0.0)
            time.sleep(seconds)
            self.proxy.set("pass")
        elif fault == "smtp_drop_after_data":
            self.smtp.drop_after_data = True
            time.sleep(max(seconds, 6.0))  # past a reviewer digest's interval
            self.smtp.drop_after_data = False

    def answers(self) -> bool:
        """The gateway answers a read that needs the database."""
        if not self.probe_url:
            return _get(f"{self.base}/healthz") == 200
        return _get(self.probe_url, token=self.probe_token) == 200

    def faults_run(self, deadline: float) -> None:
        faults = self.schedule()
        window = max(1.0, deadline - time.monotonic() - 5.0)
        slots = sorted(self.rng.uniform(0, window) for _ in faults)
        start = time.monotonic()
        for fault, at in zip(faults, slots, strict=True):
            pause = start + at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            injection = Injection(fault=fault, started=time.monotonic())
            self.injections.append(injection)
            self.out(f"[chaos] {time.strftime('%H:%M:%S')} inject {fault}")
            self.inject(fault)
            injection.healed = time.monotonic()
            if wait_for(self.answers, timeout=60, interval=0.2):
                injection.recovered = time.monotonic() - injection.started

    # Settling and the invariants --------------------------------------------------------------------

    def settled(self) -> bool:
        from approvals.audit.seal import seal_lag_seconds
        from approvals.models import (
            Execution,
            ExecutionOutcome,
            OutboxMessage,
            Preview,
            PreviewStatus,
            WebhookDelivery,
            WebhookDeliveryStatus,
        )

        _db_reset()
        in_flight = Execution.objects.filter(
            outcome__in=[ExecutionOutcome.PENDING, ExecutionOutcome.IN_PROGRESS, ExecutionOutcome.EFFECT_UNKNOWN]
        ).exclude(preview__status=PreviewStatus.NEEDS_ATTENTION)
        return not (
            Preview.objects.filter(status=PreviewStatus.APPROVED).exists()
            or in_flight.exists()
            or OutboxMessage.objects.filter(delivered_at__isnull=True).exists()
            or WebhookDelivery.objects.filter(status=WebhookDeliveryStatus.PENDING).exists()
            or seal_lag_seconds() > 0
        )

    def check(self) -> tuple[list[dict[str, Any]], list[str]]:
        from approvals.models import Approval, Execution, ExecutionOutcome, Preview, PreviewStatus, WebhookDelivery
        from refunds.models import Refund

        _db_reset()
        problems: list[str] = []
        provider: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for refund in self.stripe.refunds:
            key = (refund.get("metadata") or {}).get("idempotency_key", "")
            if refund.get("status") not in ("failed", "canceled"):
                provider[key].append(refund)
        ledger = {str(r.preview_id): r for r in Refund.objects.all()}
        previews = {str(p.pk): p for p in Preview.objects.all()}
        executions = {str(e.preview_id): e for e in Execution.objects.all()}
        per: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

        def fault_of(preview_id: str) -> str:
            at = self.traffic.proposed.get(preview_id)
            found = "none"
            for injection in self.injections:
                if at is not None and injection.started <= at:
                    found = injection.fault
            return found

        for preview_id, preview in previews.items():
            row = per[fault_of(preview_id)]
            row["proposals"] += 1
            paid = provider.get(f"refund:{preview_id}", [])
            if preview.status == PreviewStatus.EXECUTED:
                row["executions"] += 1
            if preview.status == PreviewStatus.NEEDS_ATTENTION:
                row["needs_attention"] += 1
            if len(paid) > 1:
                row["double_effects"] += len(paid) - 1
                problems.append(f"{preview_id}: refunded {len(paid)} times at the provider")
            execution = executions.get(preview_id)
            visible = preview.status == PreviewStatus.NEEDS_ATTENTION or (
                execution is not None and execution.outcome == ExecutionOutcome.EFFECT_UNRECORDED
            )
            if paid and preview_id not in ledger and not visible:
                row["unrecorded_effects"] += 1
                problems.append(f"{preview_id}: the provider refunded it; not in the ledger ({preview.status})")
            if preview.status == PreviewStatus.EXECUTED and preview.action == "refund_order" and not paid:
                row["unrecorded_effects"] += 1
                problems.append(f"{preview_id}: executed, but the provider holds no refund")
            if preview.status == PreviewStatus.FAILED and paid:
                row["unrecorded_effects"] += 1
                problems.append(f"{preview_id}: failed, but the provider refunded it")
            if preview.status == PreviewStatus.APPROVED:
                problems.append(f"{preview_id}: approved, never executed, failed or needing attention")
        for preview_id, role in set(self.traffic.told):
            if not Approval.objects.filter(preview_id=preview_id, role=role).exists():
                per[fault_of(preview_id)]["lost_decisions"] += 1
                problems.append(f"{preview_id}: the {role} was told their approval was recorded; it is gone")
        twice = self.smtp.sent_twice()
        if twice:
            per["smtp_drop_after_data"]["double_effects"] += twice
            problems.append(f"{twice} email(s) sent twice under different Message-IDs")
        received = {m["id"] for m in self.hooks.messages if m["path"].startswith("/agents/")}
        missing = [d.message_id for d in WebhookDelivery.objects.all() if d.message_id not in received]
        if missing:
            problems.append(f"{len(missing)} agent webhook deliveries never received, e.g. {missing[:3]}")
        types = {(m["body"].get("preview", {}).get("id"), m["body"].get("type")) for m in self.hooks.messages}
        for preview_id, preview in previews.items():
            if (preview_id, f"preview.{preview.status}") not in types:
                problems.append(f"{preview_id}: its agent never heard of preview.{preview.status}")
        verify = subprocess.run(
            manage("verify_audit", "--checkpoints", str(self.work / "checkpoints.jsonl")),
            env=os.environ.copy(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if verify.returncode != 0:
            problems.append("verify_audit --checkpoints failed: " + (verify.stdout + verify.stderr)[-1500:])
        rows = []
        for fault in ("none", *FAULTS):
            injected = [i for i in self.injections if i.fault == fault]
            counts = per.get(fault, {})
            recoveries = [i.recovered for i in injected if i.recovered is not None]
            rows.append(
                {
                    "fault": fault,
                    "times": len(injected),
                    "proposals": counts.get("proposals", 0),
                    "executions": counts.get("executions", 0),
                    "needs_attention": counts.get("needs_attention", 0),
                    "double_effects": counts.get("double_effects", 0),
                    "lost_decisions": counts.get("lost_decisions", 0),
                    "unrecorded_effects": counts.get("unrecorded_effects", 0),
                    "recover_s": (f"{max(recoveries):.1f}" if recoveries else ("-" if fault == "none" else "never")),
                }
            )
        for fault in FAULTS:
            if not any(i.fault == fault for i in self.injections):
                problems.append(f"{fault} was never injected")
            if any(i.fault == fault and i.recovered is None for i in self.injections):
                problems.append(f"the gateway did not answer again within 60 s of {fault}")
        return rows, problems

    def summary(self) -> str:
        agents = sum(1 for m in self.hooks.messages if m["path"].startswith("/agents/"))
        checkpoints = sum(1 for m in self.hooks.messages if m["path"] == "/checkpoints")
        statuses = self.traffic.statuses
        return (
            f"[chaos] decisions told recorded: {len(set(self.traffic.told))}; proposal answers: {len(statuses)} "
            f"({sum(1 for code in statuses if code >= 500)} 5xx); provider refunds: {len(self.stripe.refunds)}, "
            f"resets mid-answer: {self.proxy.resets if self.proxy else 0}; emails: {len(self.smtp.messages)} "
            f"({self.smtp.dropped} dropped after DATA); agent webhooks received: {agents}; checkpoint webhooks: "
            f"{checkpoints}"
        )

    def run(self) -> int:
        started = time.monotonic()
        try:
            self.start()
            self.out(f"[chaos] stack up in {time.monotonic() - started:.0f} s; traffic and faults")
            deadline = time.monotonic() + self.plan.traffic_seconds
            threads = [
                threading.Thread(target=self.customer_run, args=(i, deadline), daemon=True)
                for i in range(self.plan.customers)
            ]
            threads.append(threading.Thread(target=self.staff_run, args=(deadline,), daemon=True))
            for thread in threads:
                thread.start()
            self.faults_run(deadline)
            for thread in threads:
                thread.join(timeout=max(1.0, deadline - time.monotonic() + HTTP_TIMEOUT * 3))
            self.out(f"[chaos] faults over; settling (at most {self.plan.settle_seconds:.0f} s)")
            settle_started = time.monotonic()
            settled = wait_for(self.settled, timeout=self.plan.settle_seconds, interval=1.0)
            self.out(f"[chaos] settled: {settled} after {time.monotonic() - settle_started:.0f} s")
            rows, problems = self.check()
            if not settled:
                problems.insert(0, f"did not settle within {self.plan.settle_seconds:.0f} s")
            self.out(table(rows))
            self.out(self.summary())
            for problem in problems[:40]:
                self.out(f"INVARIANT FAILED: {problem}")
            if problems:
                self.out(f"[chaos] logs kept in {self.work}")
                self.last_rows, self.problems = rows, problems
                return 1
            self.last_rows, self.problems = rows, problems
            self.out(f"[chaos] every invariant holds ({time.monotonic() - started:.0f} s)")
            return 0
        finally:
            self.stop()
            if not getattr(self, "problems", True):
                shutil.rmtree(self.work, ignore_errors=True)


def table(rows: list[dict[str, Any]]) -> str:
    headers = [
        "fault",
        "times",
        "proposals",
        "executions",
        "needs attention",
        "double effects",
        "lost decisions",
        "unrecorded effects",
        "time to recover (s)",
    ]  # from the injection until the gateway answered again
    keys = [
        "fault",
        "times",
        "proposals",
        "executions",
        "needs_attention",
        "double_effects",
        "lost_decisions",
        "unrecorded_effects",
        "recover_s",
    ]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(row[key]) for key in keys) + " |")
    return "\n".join(lines)


def _db_reset() -> None:
    from django.db import connections

    for connection in connections.all():
        try:
            if connection.connection is not None and not connection.is_usable():
                connection.close()
        except Exception:  # noqa: BLE001 - a connection to a dead server
            connection.close()


def _get(url: str, token: str | None = None) -> int:
    import requests

    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return requests.get(url, headers=headers, timeout=3).status_code
    except requests.RequestException:
        return 0


def _login(browser: Any, base: str, username: str) -> bool:
    browser.get(f"{base}/accounts/login/", timeout=HTTP_TIMEOUT)
    response = browser.post(
        f"{base}/accounts/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": browser.cookies.get("csrftoken", "")},
        headers={"Referer": f"{base}/accounts/login/"},
        timeout=HTTP_TIMEOUT,
        allow_redirects=False,
    )
    return response.status_code in (302, 303)
