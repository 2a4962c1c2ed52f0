"""The gateway's benchmark (`make bench`, `make bench-quick`); what it measures is in docs/benchmarks.md.

    python -m bench.run [--quick] [--out FILE] [--keep-db]

It creates a fresh PostgreSQL database next to DATABASE_URL's (dropped at the end), migrates it, loads a
synthetic shop, starts gunicorn with config/gunicorn.conf.py and two Celery workers on REDIS_URL, and
measures, each against a floor taken in the same run on the same machine:

1. proposals over HTTP (wrk + bench/proposals.lua) at 1, 4, 16 and 64 connections, against two floors
   in alternating slices: the project floor (bench/floor.py, same server, same stack) and the bare floor
   (bench/bare.py, a second gunicorn with CommonMiddleware alone); then, open loop (bench/open_loop.py),
   proposals at a constant arrival rate of half the pipeline's measured capacity at 16 connections, with
   latency from each request's scheduled send time;
2. the commit pipeline (confirmations queued while the two workers are paused, then drained by them
   through Redis), against the same SQL
   transaction run by pgbench (bench/commit_floor.sql), and confirm -> executed latency with idle workers;
3. the staff console's queue with 10,000 previews waiting: first page time and query count;
4. the audit log after the run: every record sealed (by the one sealer process, `seal_audit --loop`,
   running throughout), the seal lag of every record (its first signed head's time minus its own), and
   verify_audit's checks.

It writes a JSON result and prints a Markdown table with each figure, its floor, the ratio and the target.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .autovacuum import AutovacuumStandIn

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
VENV_BIN = Path(sys.executable).parent
PIPELINE_PATH = "/api/agent/tool-calls"
FLOOR_PATH = "/bench/floor/tool-calls"
BARE_PATH = "/bench/bare/tool-calls"
CONSOLE_PATH = "/console/"
CONNECTIONS = (1, 4, 16, 64)
TARGET_CONNECTIONS = 16
CONSOLE_WAITING = 10_000


@dataclass(frozen=True)
class Profile:
    name: str
    customers: int
    orders_per_customer: int
    warmup_s: int
    duration_s: int
    slices: int
    commit_batch: int
    latency_samples: int
    floor_transactions: int
    console_repeats: int


PROFILES = {
    "full": Profile(
        "full",
        customers=5000,
        orders_per_customer=4,
        warmup_s=3,
        duration_s=20,
        slices=4,
        commit_batch=5000,
        latency_samples=300,
        floor_transactions=20000,
        console_repeats=30,
    ),
    "quick": Profile(
        "quick",
        customers=2000,
        orders_per_customer=3,
        warmup_s=1,
        duration_s=6,
        slices=2,
        commit_batch=1000,
        latency_samples=60,
        floor_transactions=4000,
        console_repeats=10,
    ),
}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * p / 100
    low, high = int(rank), min(int(rank) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# The database -------------------------------------------------------------------------------------


class Database:
    """A fresh database on DATABASE_URL's server, created here and dropped at the end."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("postgres", "postgresql", "pgsql", "postgis"):
            raise SystemExit(f"make bench needs PostgreSQL; DATABASE_URL is {parts.scheme or 'unset'}://...")
        self.name = f"gateway_bench_{datetime.now():%Y%m%d_%H%M%S}_{os.getpid()}"
        self.server = parts
        self.url = urlunsplit((parts.scheme, parts.netloc, "/" + self.name, parts.query, ""))

    def _admin(self) -> Any:
        import psycopg

        parts = self.server
        return psycopg.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5432,
            user=parts.username or "postgres",
            password=parts.password or None,
            dbname="postgres",
            autocommit=True,
        )

    def create(self) -> None:
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def drop(self) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def pgbench_args(self) -> list[str]:
        parts = self.server
        return [
            "-h",
            parts.hostname or "127.0.0.1",
            "-p",
            str(parts.port or 5432),
            "-U",
            parts.username or "postgres",
            self.name,
        ]

    def pgbench_env(self) -> dict[str, str]:
        return {**os.environ, **({"PGPASSWORD": self.server.password} if self.server.password else {})}


# Processes ----------------------------------------------------------------------------------------


class Processes:
    """gunicorn and the Celery workers, each in a process group of its own, stopped by that group's id."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs, self.started = env, logs, []

    def start(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        out = (self.logs / f"{name}.log").open("w")
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**self.env, **(extra_env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started.append((name, process))
        return process

    def stop_all(self) -> None:
        for _name, process in reversed(self.started):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _name, process in reversed(self.started):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        self.started.clear()

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) used so far by each started process with its children (a
        process group each), and by PostgreSQL and Redis on this machine: read from /proc, so that the
        report can say where a request's or an execution's CPU goes. PostgreSQL's figure includes the
        backends that have ended (the postmaster's time of its waited-for children): a worker replaces
        its connection every CELERY_DB_REUSE_MAX tasks, and its old backend's CPU must not drop out of
        the sum."""
        groups = {process.pid: name for name, process in self.started}
        spent: dict[str, float] = {name: 0.0 for name in groups.values()}
        spent["postgres"] = spent["redis"] = 0.0
        tick = os.sysconf("SC_CLK_TCK")
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue
            command = text[text.index("(") + 1 : text.rindex(")")]
            fields = text.rsplit(")", 1)[1].split()
            name = groups.get(int(fields[2]))
            if name:  # with the time of its reaped children: gunicorn recycles its workers
                spent[name] += sum(int(value) for value in fields[11:15]) / tick
            elif command.startswith("postgres"):
                spent["postgres"] += sum(int(value) for value in fields[11:15]) / tick
            elif command.startswith("redis-server"):
                spent["redis"] += (int(fields[11]) + int(fields[12])) / tick
        return spent

    def check_alive(self) -> None:
        for name, process in self.started:
            if process.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text()[-3000:]
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{tail}")


class CpuSteal:
    """The share of the machine's CPU time that the hypervisor gave to other guests (`steal` in
    /proc/stat, `st` in vmstat) over a window: on a shared VM a figure measured while 20 % of the CPU
    went elsewhere is not the code's alone, so each measured window reports it beside its figure. None
    where /proc/stat has no steal column (not Linux, or a kernel without steal accounting)."""

    def __init__(self) -> None:
        self.started = self.read()

    @staticmethod
    def read() -> list[int] | None:
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        except OSError:
            return None
        # cpu user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is in user
        return [int(value) for value in fields[1:9]] if fields[0] == "cpu" and len(fields) > 8 else None

    def percent(self) -> float | None:
        now = self.read()
        if self.started is None or now is None:
            return None
        spent = [after - before for before, after in zip(self.started, now, strict=True)]
        total = sum(spent)
        return round(100 * spent[7] / total, 1) if total else None


def steal_words(percent: float | None) -> str:
    return "CPU steal ?" if percent is None else f"CPU steal {percent:.0f} %"


def wait_for_bare(url: str, token: str, timeout: float = 60) -> None:
    """The bare floor's server answers a call (it writes one row)."""
    deadline = time.monotonic() + timeout
    body = json.dumps({"name": "refund_order", "arguments": {"order_id": "none", "amount_minor": 1}}).encode()
    while True:
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - the local server
                if response.status == 201:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the bare floor at {url} did not answer")
        time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(url: str, token: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer {url} within {timeout} s")


# 1. Proposals --------------------------------------------------------------------------------------


def run_wrk(
    *, url: str, connections: int, seconds: int, sessions_file: Path, key_prefix: str, expect: str
) -> dict[str, Any]:
    threads = 1 if connections == 1 else 2
    argv = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--timeout",
        "10s",
        "-s",
        str(BENCH / "proposals.lua"),
        url,
    ]
    env = {**os.environ, "BENCH_SESSIONS": str(sessions_file), "BENCH_KEY_PREFIX": key_prefix, "BENCH_EXPECT": expect}
    completed = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=seconds + 60)
    line = next((x for x in completed.stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
    if completed.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({completed.returncode}):\n{completed.stdout}\n{completed.stderr}")
    return json.loads(line.removeprefix("BENCH_JSON "))


def latency_percentiles(histogram: list[list[int]]) -> dict[str, float]:
    """p50/p90/p95/p99, mean and max in ms from wrk's latency histogram ([microseconds, count] pairs)."""
    ordered = sorted((int(value), int(count)) for value, count in histogram)
    total = sum(count for _value, count in ordered)
    if not total:
        return {}
    result: dict[str, float] = {}
    for name, share in (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99)):
        wanted, seen = share * total, 0
        for value, count in ordered:
            seen += count
            if seen >= wanted:
                result[name] = round(value / 1000, 2)
                break
    result["mean"] = round(sum(value * count for value, count in ordered) / total / 1000, 2)
    result["max"] = round(ordered[-1][0] / 1000, 2)
    return result


def merge_wrk_runs(runs: list[dict[str, Any]], connections: int) -> dict[str, Any]:
    """One figure from the slices of a kind: requests over the time they took, latency over all of them."""
    statuses: dict[str, int] = {}
    socket_errors: dict[str, int] = {}
    for raw in runs:
        for code, count in raw["statuses"].items():
            statuses[code] = statuses.get(code, 0) + count
        for kind, count in raw["socket_errors"].items():
            socket_errors[kind] = socket_errors.get(kind, 0) + count
    requests = sum(raw["requests"] for raw in runs)
    seconds_run = sum(raw["duration_us"] for raw in runs) / 1e6
    return {
        "connections": connections,
        "requests": requests,
        "rps": round(requests / seconds_run, 1),
        "latency_ms": latency_percentiles([pair for raw in runs for pair in raw["histogram"]]),
        "statuses": dict(sorted(statuses.items())),
        "non_contract": sum(raw["unexpected"] for raw in runs) + sum(socket_errors.values()),
        "socket_errors": socket_errors,
        "slices": len(runs),
    }


KINDS = (("pipeline", PIPELINE_PATH, "200,201,422"), ("floor", FLOOR_PATH, "201"), ("bare", BARE_PATH, "201"))


def measure_proposals(
    profile: Profile, base_urls: dict[str, str], shop: Any, run_id: str, processes: Processes
) -> dict[str, Any]:
    """Each connection count: the three kinds measured in alternating slices (pipeline, floor, bare,
    pipeline, floor, bare...), so that a machine whose speed drifts (a shared VM) weighs on all alike. Each
    slice starts after a warm-up of its own kind, unmeasured: the background work one kind leaves behind
    (autovacuum of the tables it wrote, checkpoints) is paid there, not charged to another kind's slice.
    `base_urls` gives each kind's server (the bare floor has its own gunicorn). Each kind's
    `cpu_ms_per_request` says where its CPU went during its measured slices, by process: the sealer and
    Redis work for the pipeline alone, the machine's two cores for all."""
    results: dict[str, Any] = {kind: {} for kind, _path, _expect in KINDS}
    slice_s = max(1, profile.duration_s // profile.slices)
    for connections in CONNECTIONS:
        runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind, _path, _expect in KINDS}
        cpu: dict[str, dict[str, float]] = {kind: {} for kind, _path, _expect in KINDS}
        steal: dict[str, list[float | None]] = {kind: [] for kind, _path, _expect in KINDS}
        for index in range(profile.slices):
            for kind, path, expect in KINDS:
                base_url = base_urls[kind]
                run_wrk(
                    url=base_url + path,
                    connections=connections,
                    seconds=profile.warmup_s,
                    sessions_file=shop.sessions_file,
                    key_prefix=f"{run_id}-{kind}-c{connections}-{index}-warm",
                    expect=expect,
                )
                before, machine = processes.cpu_seconds(), CpuSteal()
                runs[kind].append(
                    run_wrk(
                        url=base_url + path,
                        connections=connections,
                        seconds=slice_s,
                        sessions_file=shop.sessions_file,
                        key_prefix=f"{run_id}-{kind}-c{connections}-{index}",
                        expect=expect,
                    )
                )
                after = processes.cpu_seconds()
                for name, seconds in after.items():
                    cpu[kind][name] = cpu[kind].get(name, 0.0) + seconds - before.get(name, 0.0)
                steal[kind].append(machine.percent())
        for kind, _path, _expect in KINDS:
            result = results[kind][str(connections)] = merge_wrk_runs(runs[kind], connections)
            result["cpu_ms_per_request"] = {
                name: round(1000 * seconds / max(1, result["requests"]), 2)
                for name, seconds in sorted(cpu[kind].items())
                if seconds > 0
            }
            known = [percent for percent in steal[kind] if percent is not None]
            result["cpu_steal_percent"] = round(statistics.mean(known), 1) if known else None
            lat = result["latency_ms"]
            log(
                f"  {kind:8} c={connections:<3} {result['rps']:8.1f} req/s  p50 {lat['p50']:7.2f} ms  "
                f"p95 {lat['p95']:7.2f}  p99 {lat['p99']:7.2f}  statuses {result['statuses']}  "
                f"non-contract {result['non_contract']}  {steal_words(result['cpu_steal_percent'])}"
            )
            log(f"  {kind:8} c={connections:<3} CPU ms per request: {result['cpu_ms_per_request']}")
    return results


# 2. The commit pipeline ---------------------------------------------------------------------------


def _confirm(preview: Any) -> None:
    from approvals.core.services import preview_approve
    from approvals.models import ApprovalRole

    preview_approve(preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest)


def _wait_executed(ids: list[Any], timeout: float, interval: float = 0.05) -> dict[str, int]:
    """Wait until none of `ids` is still approved (or nothing moved for `timeout` seconds)."""
    from django.db.models import Count

    from approvals.models import Preview, PreviewStatus

    last, last_change = None, time.monotonic()
    while True:
        counts = dict(Preview.objects.filter(pk__in=ids).values_list("status").annotate(n=Count("pk")))
        if not counts.get(PreviewStatus.APPROVED) and not counts.get(PreviewStatus.AWAITING_CUSTOMER):
            return counts
        if counts != last:
            last, last_change = counts, time.monotonic()
        elif time.monotonic() - last_change > timeout:
            return counts
        time.sleep(interval)


def measure_commit_throughput(profile: Profile, processes: Processes) -> dict[str, Any]:
    """Queue a batch of executions with the workers paused, then let both workers drain the queue:
    executions per second from the moment they resume to the last `executed_at`.

    Each preview is confirmed in its own transaction, as the confirmation page does, and its execution
    is published at that commit; the workers stop consuming first (Celery's `cancel_consumer`) and
    start again (`add_consumer`) once every execution is in the queue. (Until the fourth round the batch
    was confirmed in one transaction instead: its COMMIT alone took 11 s for 5,000 confirmations, and
    the publishing that followed ran beside the workers.)"""
    from django.conf import settings
    from django.db.models import Max

    from approvals.models import Preview, PreviewStatus
    from config.celery import app

    from .shop import previews_for

    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    workers = [f"{settings.BENCH_RUN_ID}-w{i}@{socket.gethostname()}" for i in (1, 2)]
    previews = previews_for(label="CT", count=profile.commit_batch)
    for preview in previews:
        preview.actor  # noqa: B018 - load the actors before the clock starts
    paused = app.control.cancel_consumer(queue, destination=workers, reply=True, timeout=5)
    if len(paused) != 2:
        raise RuntimeError(f"could not pause both workers' consumers: {paused}")
    unsealed_before, background_before = _unsealed_records(), _background_work()
    maintenance_before = _table_maintenance()
    checkpoints_before, own_cpu = _checkpoints_so_far(), time.process_time()
    cpu_confirming = processes.cpu_seconds()
    confirm_started = time.time()
    confirm_ms = []
    for preview in previews:
        began = time.perf_counter()
        _confirm(preview)
        confirm_ms.append((time.perf_counter() - began) * 1000)
    unsealed_after = _unsealed_records()
    cpu_confirmed = processes.cpu_seconds()
    confirming = {
        "runner_cpu_ms_per_confirmation": round((time.process_time() - own_cpu) * 1000 / len(previews), 2),
        "cpu_ms_per_confirmation": {
            name: round((cpu_confirmed[name] - cpu_confirming.get(name, 0.0)) * 1000 / len(previews), 2)
            for name in cpu_confirmed
        },
        "checkpoints_during": _checkpoints_so_far() - checkpoints_before,
        "autovacuum_during": _maintenance_since(maintenance_before),
        "background_before": background_before,
    }
    cpu_before, machine = processes.cpu_seconds(), CpuSteal()
    resumed_at = confirmed = time.time()
    resumed = app.control.add_consumer(queue, destination=workers, reply=True, timeout=5)
    if len(resumed) != 2:
        raise RuntimeError(f"could not resume both workers' consumers: {resumed}")
    ids = [p.pk for p in previews]
    # Polled seldom, to leave PostgreSQL to the workers: the figure comes from executed_at, not the poll.
    counts = _wait_executed(ids, timeout=60, interval=0.5)
    cpu_after, steal = processes.cpu_seconds(), machine.percent()
    executed = Preview.objects.filter(pk__in=ids, status=PreviewStatus.EXECUTED)
    last = executed.aggregate(last=Max("executed_at"))["last"]
    n = counts.get(PreviewStatus.EXECUTED, 0)
    elapsed = last.timestamp() - resumed_at if n else float("nan")
    return {
        "previews": len(ids),
        "executed": n,
        "statuses": {str(k): v for k, v in counts.items()},
        "confirm_seconds": round(confirmed - confirm_started, 2),
        # Each set-up confirmation's time, in its first and last tenth, and the sealer's backlog (audit
        # records not sealed yet) before and after them: docs/benchmarks.md, "the set-up confirmations".
        "confirm_ms": _confirm_times(confirm_ms),
        "unsealed_records": {"before": unsealed_before, "after": unsealed_after},
        "confirming": confirming,
        "drain_seconds": round(elapsed, 3),
        "executions_per_s": round(n / elapsed, 1) if n else 0.0,
        "cpu_steal_percent": steal,
        # CPU of the drain alone, per execution (of it, the poll above is one query every half second).
        "cpu_ms_per_execution": {
            name: round((cpu_after[name] - cpu_before.get(name, 0.0)) * 1000 / max(1, n), 2)
            for name in cpu_after
            if name in ("worker1", "worker2", "sealer", "postgres")
        },
    }


def _background_work() -> list[str]:
    """PostgreSQL's own work running now (autovacuum, a checkpoint's writer), from pg_stat_activity."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(nullif(query, ''), backend_type) FROM pg_stat_activity "
            "WHERE backend_type IN ('autovacuum worker', 'checkpointer') AND state IS DISTINCT FROM 'idle' "
            "AND (backend_type <> 'checkpointer' OR wait_event IS DISTINCT FROM 'CheckpointerMain')"
        )
        return [row[0][:80] for row in cursor.fetchall()]


def _table_maintenance() -> dict[str, tuple[int, int]]:
    """Each table's (vacuum, analyze) counts so far: autovacuum's, or the runner's standing in for it
    (bench/autovacuum.py)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, autovacuum_count + vacuum_count, autoanalyze_count + analyze_count "
            "FROM pg_stat_user_tables"
        )
        return {name: (vacuums, analyzes) for name, vacuums, analyzes in cursor.fetchall()}


def _maintenance_since(before: dict[str, tuple[int, int]]) -> dict[str, str]:
    """The tables autovacuum vacuumed or analyzed since `before` (pg_stat_user_tables)."""
    done = {}
    for name, (vacuums, analyzes) in _table_maintenance().items():
        was = before.get(name, (0, 0))
        words = [w for w, n in (("vacuum", vacuums - was[0]), ("analyze", analyzes - was[1])) if n]
        if words:
            done[name] = " + ".join(words)
    return done


def time_confirmations(previews: list[Any]) -> dict[str, float]:
    """Confirm each (as the commit phase's set-up does, its execution published to the paused queue or,
    here, to idle workers) and time each confirmation, with this process's CPU per confirmation."""
    for preview in previews:
        preview.actor  # noqa: B018 - load the actors before the clock starts
    own_cpu, times = time.process_time(), []
    for preview in previews:
        began = time.perf_counter()
        _confirm(preview)
        times.append((time.perf_counter() - began) * 1000)
    return {
        **_confirm_times(times),
        "runner_cpu_ms_per_confirmation": round((time.process_time() - own_cpu) * 1000 / max(1, len(times)), 2),
    }


def _unsealed_records() -> int:
    from approvals.models import AuditLeaf, AuditRecord

    return AuditRecord.objects.count() - AuditLeaf.objects.count()


def _confirm_times(times: list[float]) -> dict[str, float]:
    tenth = max(1, len(times) // 10)
    return {
        "p50": round(percentile(times, 50), 2),
        "p95": round(percentile(times, 95), 2),
        "first_tenth_p50": round(percentile(times[:tenth], 50), 2),
        "last_tenth_p50": round(percentile(times[-tenth:], 50), 2),
    }


def measure_confirm_latency(profile: Profile) -> dict[str, Any]:
    """One confirmation at a time with the workers idle: from the confirmation's commit to the worker's
    executed_at (both on this machine's clock), waiting for each before the next."""
    import random

    from django.db import transaction

    from approvals.models import Preview, PreviewStatus

    from .shop import previews_for

    previews = previews_for(label="CL", count=profile.latency_samples)
    samples, failed = [], 0
    rng = random.Random(6)
    for preview in previews:
        preview.actor  # noqa: B018
        time.sleep(rng.uniform(0.02, 0.06))  # the workers are idle, blocked on the broker
        committed: list[float] = []
        with transaction.atomic():
            transaction.on_commit(lambda committed=committed: committed.append(time.time()))
            _confirm(preview)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            row = Preview.objects.filter(pk=preview.pk).values("status", "executed_at").get()
            if row["status"] != PreviewStatus.APPROVED:
                break
            time.sleep(0.002)
        if row["status"] == PreviewStatus.EXECUTED:
            samples.append((row["executed_at"].timestamp() - committed[0]) * 1000)
        else:
            failed += 1
    return {
        "samples": len(samples),
        "not_executed": failed,
        "p50_ms": round(percentile(samples, 50), 1),
        "p95_ms": round(percentile(samples, 95), 1),
        "max_ms": round(max(samples), 1) if samples else None,
    }


COMMIT_FLOORS = {
    # name: (script, orders' prefix, what it is)
    "state_machine": (
        "commit_floor_state_machine.sql",
        "PS",
        "the state machine's own SQL: 3 transactions, 23 statements",
    ),
    "one_transaction": ("commit_floor.sql", "PF", "one transaction of the SQL an execution cannot do without"),
}


def floor_statements(script: str = "commit_floor_state_machine.sql") -> list[str]:
    """The first word of each statement a floor's script sends, BEGIN and COMMIT included, without its
    comments and the reads that feed pgbench's variables (`\\gset`: its sequence and bench_commit_floor, which
    in a worker are the task's message)."""
    lines = [
        line
        for line in (BENCH / script).read_text().splitlines()
        if line.strip() and not line.startswith("--") and not line.rstrip().endswith("\\gset")
    ]
    return [statement.split()[0].upper() for statement in " ".join(lines).split(";") if statement.strip()]


def measure_commit_floor(profile: Profile, database: Database, clients: int, floor: str) -> dict[str, Any]:
    """A floor's SQL through pgbench (COMMIT_FLOORS), on approved previews of orders of its own, each with
    its pending execution and the customer's approval (as a confirmation leaves them)."""
    from django.db import connection

    script, prefix, _words = COMMIT_FLOORS[floor]
    count = profile.floor_transactions
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_commit_floor")
        cursor.execute("DROP SEQUENCE IF EXISTS bench_commit_floor_seq")
        cursor.execute("SELECT id FROM auth_user WHERE username LIKE 'bench-c%%' ORDER BY id LIMIT 1")
        customer = cursor.fetchone()[0]
        cursor.execute(
            """
            INSERT INTO refunds_order (number, customer_id, currency, total_minor, refunded_minor, status,
                                       placed_at, delivered_at, payment_ref, version, created_at, updated_at)
            SELECT %s || '-' || g, %s, 'EUR', 100000, 0, 'delivered', current_date - 20, current_date - 10,
                   'pi_' || lower(%s) || '_' || g, 1, now(), now()
            FROM generate_series(1, %s) g""",
            [prefix, customer, prefix, count],
        )
        cursor.execute(
            """
            INSERT INTO approvals_preview (id, action, actor_id, subject_type, subject_id, subject_version, payload,
                amount_minor, currency, proposal_key, digest, required_approvals, status, created_at, expires_at,
                status_changed_at, failure_code, failure_reason, staff_approvals_needed, origin, proposed_by_id)
            SELECT gen_random_uuid(), 'refund_order', %s, 'order', %s || '-' || g, 1,
                   jsonb_build_object('order_id', %s || '-' || g, 'amount_minor', 500, 'currency', 'EUR',
                                      'reason', 'damaged'),
                   500, 'EUR', md5(%s || '-key-' || g) || md5(%s || '-key2-' || g),
                   md5(%s || g) || md5(%s || '2-' || g),
                   '["customer"]', 'approved', now(), now() + interval '2 hours', now(), '', '', 1, 'agent', %s
            FROM generate_series(1, %s) g""",
            [customer, prefix, prefix, prefix, prefix, prefix, prefix, customer, count],
        )
        cursor.execute(
            """
            CREATE TABLE bench_commit_floor AS
            SELECT row_number() OVER (ORDER BY o.id) AS n, p.id AS preview_id, o.id AS order_id, o.number,
                   o.customer_id, o.payment_ref
            FROM refunds_order o JOIN approvals_preview p ON p.subject_type = 'order' AND p.subject_id = o.number
            WHERE o.number LIKE %s""",
            [prefix + "-%"],
        )
        cursor.execute(
            """
            INSERT INTO approvals_execution (preview_id, outcome, attempt, fencing_token, lease_owner, effect_possible,
                                             code, detail, deadline, created_at, updated_at)
            SELECT preview_id, 'pending', 0, 0, '', false, '', '', now() + interval '1 day', now(), now()
            FROM bench_commit_floor"""
        )
        cursor.execute(
            """
            INSERT INTO approvals_approval (preview_id, approver_id, role, basis, digest, subject_version, created_at,
                                            lapsed_reason)
            SELECT f.preview_id, f.customer_id, 'customer', '', p.digest, 1, now(), ''
            FROM bench_commit_floor f JOIN approvals_preview p ON p.id = f.preview_id"""
        )
        cursor.execute("ALTER TABLE bench_commit_floor ADD PRIMARY KEY (n)")
        cursor.execute("CREATE SEQUENCE bench_commit_floor_seq")
        cursor.execute("ANALYZE")
    argv = [
        "pgbench",
        "-n",
        "-c",
        str(clients),
        "-j",
        str(clients),
        "-t",
        str(count // clients),
        "-f",
        str(BENCH / script),
        *database.pgbench_args(),
    ]
    machine = CpuSteal()
    completed = subprocess.run(argv, cwd=ROOT, env=database.pgbench_env(), capture_output=True, text=True, timeout=600)
    steal = machine.percent()
    match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", completed.stdout)
    failed = re.search(r"number of failed transactions: (\d+)", completed.stdout)
    latency = re.search(r"latency average = ([\d.]+) ms", completed.stdout)
    if completed.returncode != 0 or match is None:
        raise RuntimeError(f"pgbench failed:\n{completed.stdout}\n{completed.stderr}")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM approvals_preview WHERE subject_id LIKE %s AND status = 'executed'", [prefix + "-%"]
        )
        executed = cursor.fetchone()[0]
    if executed != (count // clients) * clients:
        raise RuntimeError(f"the {floor} floor executed {executed} previews of {(count // clients) * clients}")
    return {
        "script": script,
        "clients": clients,
        "transactions": count,
        # pgbench's "transaction" is one run of the script: for the state machine, one whole execution.
        "tps": round(float(match.group(1)), 1),
        "latency_avg_ms": float(latency.group(1)) if latency else None,
        "failed": int(failed.group(1)) if failed else 0,
        "cpu_steal_percent": steal,
    }


def measure_open_loop(
    profile: Profile, base_url: str, shop: Any, run_id: str, capacity_rps: float, workdir: Path
) -> dict[str, Any]:
    """Proposals, in the closed loop's mix, at a constant arrival rate of half the pipeline's capacity (its
    closed-loop req/s at TARGET_CONNECTIONS), latency from each request's scheduled send time
    (bench/open_loop.py). Beside it, an fsync probe in the work directory (`disk_fsync_ms`; the disk of
    PostgreSQL's WAL when they share one): every commit waits for an fsync, so a disk that stalls shows
    as a cluster of slow answers."""
    import asyncio

    from .open_loop import proposal_calls, run_open_loop

    rate = max(1.0, round(capacity_rps / 2, 1))
    calls = proposal_calls(shop.sessions_file, key_prefix=f"{run_id}-open")
    forced = _checkpoint_now()
    checkpoints_before = _checkpoints_so_far()
    asyncio.run(
        run_open_loop(
            url=base_url + PIPELINE_PATH,
            rate=rate,
            seconds=profile.warmup_s,
            make_call=proposal_calls(shop.sessions_file, key_prefix=f"{run_id}-open-warm"),
        )
    )
    with FsyncProbe(workdir) as disk:
        machine = CpuSteal()
        result = asyncio.run(
            run_open_loop(url=base_url + PIPELINE_PATH, rate=rate, seconds=profile.duration_s, make_call=calls)
        )
        result["cpu_steal_percent"] = machine.percent()
    result["capacity_rps"] = capacity_rps
    result["non_contract"] = sum(n for code, n in result["statuses"].items() if code not in ("200", "201", "422"))
    result["checkpoint_forced_before"] = forced
    result["checkpoints_during"] = _checkpoints_so_far() - checkpoints_before
    result["disk_fsync_ms"] = disk.summary()
    return result


class FsyncProbe:
    """A thread that appends a few bytes to a file and fsyncs it every 20 ms, timing each fsync: what a
    COMMIT waits for, on the same disk when the work directory and PostgreSQL's data share one (as on
    the benchmark machine; see docs/benchmarks.md). Reports the percentiles, and the seconds into the
    window in which an fsync took 50 ms or more."""

    def __init__(self, directory: Path, every_s: float = 0.02) -> None:
        self.path = directory / "fsync-probe"
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []  # (seconds since start, fsync ms)
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, daemon=True)

    def __enter__(self) -> FsyncProbe:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _probe(self) -> None:
        with open(self.path, "ab") as file:
            while not self._stop.wait(self.every_s):
                file.write(b"x" * 512)
                file.flush()
                began = time.monotonic()
                os.fsync(file.fileno())
                self.samples.append((began - self._started, (time.monotonic() - began) * 1000))

    def summary(self) -> dict[str, Any]:
        from .open_loop import SLOW_MS, percentiles, slow_by_second

        return {
            "samples": len(self.samples),
            **percentiles([spent for _at, spent in self.samples]),
            f"over_{SLOW_MS}ms_by_second": slow_by_second(self.samples),
        }


def _checkpoint_now() -> bool:
    """A CHECKPOINT before a short measured window, as pgbench makes one before its run: PostgreSQL's
    timed checkpoint (every 5 min by default) would otherwise fall into the window by chance, and its
    writes can stall commits. Needs a superuser or pg_checkpoint; without, the run goes on and says so
    (`checkpoint_forced_before`, and `checkpoints_during` the window)."""
    from django.db import DatabaseError, connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("CHECKPOINT")
    except DatabaseError:
        return False
    return True


def _checkpoints_so_far() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter")
        return int(cursor.fetchone()[0])


SEAL_LAG_SQL = """
SELECT count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), percentile_cont(0.95) WITHIN GROUP (ORDER BY lag),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), max(lag)
FROM (
    SELECT head.timestamp / 1000.0 - extract(epoch FROM sealed.last_write) AS lag
    FROM (
        SELECT leaf.index, max(record.created_at) OVER (PARTITION BY record.transaction_id) AS last_write
        FROM approvals_auditleaf leaf
        JOIN approvals_auditrecord record ON record.id = leaf.record_id
        WHERE record.created_at >= %s
    ) sealed
    CROSS JOIN LATERAL (
        SELECT h.timestamp FROM approvals_audittreehead h WHERE h.size > sealed.index ORDER BY h.size LIMIT 1
    ) head
) lags
"""


def measure_seal_lag(since: datetime) -> dict[str, Any]:
    """How long each audit record written since `since` waited to be sealed after its transaction: the time
    of the first signed tree head that includes it minus the time of its transaction's last audit record
    (the nearest to its COMMIT the database keeps; a record's own time would count the rest of a long
    transaction as seal lag; and a long COMMIT still counts, which the records cannot show)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(SEAL_LAG_SQL, [since])
        count, p50, p95, p99, worst = cursor.fetchone()

    def as_ms(value: Any) -> float | None:
        return None if value is None else round(float(value) * 1000, 1)

    return {"records": count, "p50_ms": as_ms(p50), "p95_ms": as_ms(p95), "p99_ms": as_ms(p99), "max_ms": as_ms(worst)}


def verify_audit_log(timeout: float = 60) -> dict[str, Any]:
    """Wait for the sealer to seal every record written during the run, then check the log as
    `manage.py verify_audit` does (leaves, every signed head, consistency between heads)."""
    from approvals.audit.seal import audit_verify, public_key
    from approvals.models import AuditLeaf, AuditRecord

    deadline = time.monotonic() + timeout
    while AuditLeaf.objects.count() < AuditRecord.objects.count() and time.monotonic() < deadline:
        time.sleep(0.2)
    start = time.monotonic()
    summary = audit_verify(public_key=public_key())
    return {
        "records": AuditRecord.objects.count(),
        "sealed": summary.leaves,
        "heads": summary.heads,
        "unsealed": summary.unsealed,
        "intact": summary.problem is None,
        "problem": summary.problem.message if summary.problem else None,
        "seconds": round(time.monotonic() - start, 1),
    }


# 3. The console -----------------------------------------------------------------------------------


def measure_console_page(client: Any, repeats: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    machine = CpuSteal()
    start = time.perf_counter()
    response = client.get(CONSOLE_PATH)
    cold = (time.perf_counter() - start) * 1000
    assert response.status_code == 200, response.status_code
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        response = client.get(CONSOLE_PATH)
        times.append((time.perf_counter() - start) * 1000)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(CONSOLE_PATH)
    rows = response.content.count(b'class="queue-row') or None
    return {
        "cold_ms": round(cold, 1),
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(percentile(times, 95), 1),
        "queries": len(queries),
        "query_sql": [q["sql"][:300] for q in queries.captured_queries],
        "rows_marker": rows,
        "cpu_steal_percent": machine.percent(),
    }


def measure_console(profile: Profile) -> dict[str, Any]:
    from django.test import Client

    from approvals.models import PreviewStatus

    from .shop import previews_for, reviewer

    person = reviewer()
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(person)
    previews_for(label="CQS", count=10, status=PreviewStatus.AWAITING_STAFF, amount_minor=25_000)
    small = measure_console_page(client, profile.console_repeats)
    previews_for(label="CQ", count=CONSOLE_WAITING - 10, status=PreviewStatus.AWAITING_STAFF, amount_minor=25_000)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    full = measure_console_page(client, profile.console_repeats)
    return {"waiting_10": small, f"waiting_{CONSOLE_WAITING}": full}


# The report ---------------------------------------------------------------------------------------


def _met(ok: bool | None) -> str:
    return "—" if ok is None else ("yes" if ok else "**no**")


def report_rows(result: dict[str, Any]) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    proposals = result.get("proposals")
    if proposals:
        for c in CONNECTIONS:
            pipe, floor, bare = (proposals[kind][str(c)] for kind in ("pipeline", "floor", "bare"))
            ratio = pipe["rps"] / floor["rps"] if floor["rps"] else 0
            bare_ratio = pipe["rps"] / bare["rps"] if bare["rps"] else 0
            lat = pipe["latency_ms"]
            target = c == TARGET_CONNECTIONS
            rows.append(
                {
                    "figure": f"Proposals, {c} connection{'s' if c > 1 else ''}: req/s (closed loop)",
                    "value": f"{pipe['rps']:.0f}",
                    "floor": f"{floor['rps']:.0f} (project floor)",
                    "ratio": f"{ratio:.0%}",
                    "target": "≥ 55 %" if target else "",
                    "met": _met(ratio >= 0.55) if target else "",
                }
            )
            rows.append(
                {
                    "figure": f"Proposals, {c} connection{'s' if c > 1 else ''}: req/s against the bare floor",
                    "value": f"{pipe['rps']:.0f}",
                    "floor": f"{bare['rps']:.0f} (bare floor)",
                    "ratio": f"{bare_ratio:.0%}",
                    "target": "≥ 25 %" if target else "",
                    "met": _met(bare_ratio >= 0.25) if target else "",
                }
            )
            rows.append(
                {
                    "figure": f"Proposals, {c} conn.: closed-loop latency p50 / p95 / p99 (ms)",
                    "value": f"{lat['p50']:.1f} / {lat['p95']:.1f} / {lat['p99']:.1f}",
                    "floor": f"{floor['latency_ms']['p50']:.1f} / {floor['latency_ms']['p95']:.1f} / "
                    f"{floor['latency_ms']['p99']:.1f}",
                    "ratio": "",
                    "target": "",
                    "met": "",
                }
            )
        bad = sum(proposals["pipeline"][str(c)]["non_contract"] for c in CONNECTIONS)
        total = sum(proposals["pipeline"][str(c)]["requests"] for c in CONNECTIONS)
        rows.append(
            {
                "figure": f"Non-contract responses (of {total} proposals)",
                "value": str(bad),
                "floor": "",
                "ratio": "",
                "target": "0",
                "met": _met(bad == 0),
            }
        )
    open_loop = result.get("open_loop")
    if open_loop:
        lat, disk = open_loop["latency_ms"], open_loop.get("disk_fsync_ms", {})
        rows.append(
            {
                "figure": f"Proposals, open loop at {open_loop['rate']:.0f}/s "
                f"(half of {open_loop['capacity_rps']:.0f}): "
                "latency from scheduled send p50 / p95 / p99 (ms)",
                "value": f"{lat['p50']:.1f} / {lat['p95']:.1f} / {lat['p99']:.1f}",
                "floor": f"send lag p99 {open_loop['send_lag_ms'].get('p99', 0):.1f}; "
                f"disk fsync p99 / max {disk.get('p99', '?')} / {disk.get('max', '?')}; "
                f"checkpoints during: {open_loop.get('checkpoints_during', '?')}; "
                f"resent after a keep-alive close: {open_loop.get('resent_after_keepalive_close', 0)}; "
                f"{steal_words(open_loop.get('cpu_steal_percent'))}",
                "ratio": "",
                "target": "p99 < 50",
                "met": _met(lat["p99"] < 50 and not open_loop["non_contract"]),
            }
        )
    commit = result.get("commit")
    if commit:
        pipe, floor = commit["throughput"], commit["floor"]
        ratio = pipe["executions_per_s"] / floor["tps"] if floor["tps"] else 0
        rows.append(
            {
                "figure": f"Commit pipeline: executions/s (2 workers, {pipe['executed']} previews)",
                "value": f"{pipe['executions_per_s']:.0f}",
                "floor": f"{floor['tps']:.0f} (the state machine's SQL, pgbench, 2 clients)",
                "ratio": f"{ratio:.0%}",
                "target": "≥ 50 %",
                "met": _met(ratio >= 0.5),
            }
        )
        reference = commit.get("floor_one_transaction")
        if reference:
            one = pipe["executions_per_s"] / reference["tps"] if reference["tps"] else 0
            rows.append(
                {
                    "figure": "Commit pipeline against one transaction (reference)",
                    "value": f"{pipe['executions_per_s']:.0f}",
                    "floor": f"{reference['tps']:.0f} (one transaction, pgbench, 2 clients)",
                    "ratio": f"{one:.0%}",
                    "target": "",
                    "met": "",
                }
            )
        before = result.get("confirmations_before_proposals")
        if before and pipe.get("confirm_ms"):
            after = pipe["confirm_ms"]
            rows.append(
                {
                    "figure": "Set-up confirmations: p50 / p95 (ms), young database → after the proposals",
                    "value": f"{after['p50']:.1f} / {after['p95']:.1f}",
                    "floor": f"{before['p50']:.1f} / {before['p95']:.1f} (young database)",
                    "ratio": f"{after['p50'] / before['p50']:.2f}×" if before["p50"] else "",
                    "target": "",
                    "met": "",
                }
            )
        lat = commit["latency"]
        rows.append(
            {
                "figure": f"Confirm → executed, idle workers: p50 / p95 (ms, {lat['samples']} samples)",
                "value": f"{lat['p50_ms']:.0f} / {lat['p95_ms']:.0f}",
                "floor": "",
                "ratio": "",
                "target": "p95 < 1000",
                "met": _met(lat["p95_ms"] < 1000 and not lat["not_executed"]),
            }
        )
    audit = result.get("audit")
    if audit:
        lag, log_check = audit["seal_lag"], audit["verify"]
        rows.append(
            {
                "figure": f"Audit seal lag over the run: p50 / p95 / max (ms, {lag['records']} records)",
                "value": f"{lag['p50_ms']} / {lag['p95_ms']} / {lag['max_ms']}",
                "floor": "",
                "ratio": "",
                "target": "p95 < 2000",
                "met": _met(lag["p95_ms"] is not None and lag["p95_ms"] < 2000),
            }
        )
        rows.append(
            {
                "figure": "Audit log after the run (verify_audit)",
                "value": f"{log_check['sealed']} of {log_check['records']} records sealed, "
                f"{log_check['heads']} heads, {'intact' if log_check['intact'] else 'BROKEN'}",
                "floor": "",
                "ratio": "",
                "target": "intact, all sealed",
                "met": _met(log_check["intact"] and log_check["sealed"] == log_check["records"]),
            }
        )
    console = result.get("console")
    if console:
        small, full = console["waiting_10"], console[f"waiting_{CONSOLE_WAITING}"]
        rows.append(
            {
                "figure": f"Console queue, {CONSOLE_WAITING:,} waiting: first page p50 / p95 (ms)",
                "value": f"{full['p50_ms']:.1f} / {full['p95_ms']:.1f}",
                "floor": f"{small['p50_ms']:.1f} / {small['p95_ms']:.1f} (10 waiting)",
                "ratio": f"{full['p50_ms'] / small['p50_ms']:.2f}×" if small["p50_ms"] else "",
                "target": "< 100",
                "met": _met(full["p95_ms"] < 100),
            }
        )
        rows.append(
            {
                "figure": f"Console queue, {CONSOLE_WAITING:,} waiting: queries",
                "value": str(full["queries"]),
                "floor": f"{small['queries']} (10 waiting)",
                "ratio": "",
                "target": "constant",
                "met": _met(full["queries"] == small["queries"]),
            }
        )
    steal = machine_steal(result)
    if steal:
        rows.append(
            {
                "figure": "CPU steal (the hypervisor's share, vmstat's `st`) during each measured window (%)",
                "value": "; ".join(f"{window} {'?' if percent is None else percent}" for window, percent in steal),
                "floor": "",
                "ratio": "",
                "target": "",
                "met": "—",
            }
        )
    autovacuum = result.get("autovacuum")
    if autovacuum:
        if autovacuum["stood_in"]:
            done = ", ".join(f"{table} {n}" for table, n in sorted(autovacuum["analyzed"].items())) or "nothing due"
            words = f"off on the server: the runner stood in ({autovacuum['passes']} rounds; analyzed {done})"
        else:
            words = autovacuum["server_autovacuum"]
        rows.append(
            {"figure": "PostgreSQL's autovacuum", "value": words, "floor": "", "ratio": "", "target": "", "met": "—"}
        )
    return rows


def machine_steal(result: dict[str, Any]) -> list[tuple[str, float | None]]:
    """(window, CPU steal %) for each measured window of the run, in the report's order."""
    windows: list[tuple[str, float | None]] = []
    proposals = result.get("proposals")
    if proposals:
        for kind in ("pipeline", "floor", "bare"):
            measured = proposals[kind].get(str(TARGET_CONNECTIONS), {})
            windows.append((f"{kind} c={TARGET_CONNECTIONS}", measured.get("cpu_steal_percent")))
    if result.get("open_loop"):
        windows.append(("open loop", result["open_loop"].get("cpu_steal_percent")))
    if result.get("commit"):
        windows.append(("commit drain", result["commit"]["throughput"].get("cpu_steal_percent")))
        windows.append(("pgbench", result["commit"]["floor"].get("cpu_steal_percent")))
    if result.get("console"):
        windows.append(("console", result["console"][f"waiting_{CONSOLE_WAITING}"].get("cpu_steal_percent")))
    return windows


def markdown_table(rows: list[dict[str, str]]) -> str:
    header = "| figure | value | floor | ratio | target | met? |\n|---|---:|---:|---:|---|---|\n"
    return header + "".join(
        f"| {r['figure']} | {r['value']} | {r['floor']} | {r['ratio']} | {r['target']} | {r['met']} |\n" for r in rows
    )


# Main ---------------------------------------------------------------------------------------------


def bench_environment(database_url: str, run_id: str) -> dict[str, str]:
    """The environment every process of a run (and the in-process profiles) runs Django with: the
    benchmark's settings on its own database, production-like (no DEBUG, a real broker, the local gateway)."""
    return {
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "DATABASE_URL": database_url,
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "PAYMENT_GATEWAY": "local",
        "LOG_LEVEL": "WARNING",
        "BENCH_RUN_ID": run_id,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the everyday run, under two minutes")
    parser.add_argument("--out", type=Path, help="where to write the JSON result")
    parser.add_argument("--keep-db", action="store_true", help="keep the benchmark database afterwards")
    parser.add_argument("--only", default="proposals,commit,console", help="comma-separated phases to run")
    args = parser.parse_args(argv)
    profile = PROFILES["quick" if args.quick else "full"]
    phases = {p.strip() for p in args.only.split(",") if p.strip()}
    for tool in ("wrk", "pgbench"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (make bench installs it with apt-get)")

    started = time.time()
    run_id = f"bench-{secrets.token_hex(4)}"
    database = Database(os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres")
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    port = free_port()
    env = {
        **os.environ,
        **bench_environment(database.url, run_id),
        "REDIS_URL": redis_url,
        # A key of the run's own for the sealer (never printed; the run's database is dropped after).
        "AUDIT_SIGNING_KEY": base64.b64encode(os.urandom(32)).decode(),
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "PYTHONUNBUFFERED": "1",
        # STATIC_ROOT is not collected for a benchmark; whitenoise says so once per process.
        "PYTHONWARNINGS": "ignore:No directory at:UserWarning",
    }
    os.environ.update(env)
    warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
    processes = Processes(env, workdir)
    result: dict[str, Any] = {
        "profile": asdict(profile),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    log(f"{profile.name} run {run_id}: database {database.name}, Redis {redis_url}, work files in {workdir}")
    database.create()
    stand_in = AutovacuumStandIn(database.url)
    ok = False
    try:
        log(f"autovacuum: {stand_in.start()}")
        result.update(_run(profile, phases, database, processes, workdir, port, run_id))
        ok = True
    except BaseException:
        for log_file in sorted(workdir.glob("*.log")):
            print(f"--- {log_file.name} (last lines)\n{log_file.read_text()[-2000:]}", file=sys.stderr)
        raise
    finally:
        result["autovacuum"] = stand_in.stop()
        processes.stop_all()
        from django.db import connections

        connections.close_all()
        if args.keep_db:
            log(f"kept database {database.name}")
        else:
            database.drop()
            log(f"dropped database {database.name}")
        _forget_queue(redis_url, run_id)
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"logs kept in {workdir}")
    result["seconds"] = round(time.time() - started, 1)
    rows = report_rows(result)
    result["table"] = rows
    out = args.out or BENCH / "results" / f"{profile.name}-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print()
    print(markdown_table(rows))
    log(f"{profile.name} run took {result['seconds']} s; JSON result in {out}")
    return 0


def _forget_queue(redis_url: str, run_id: str) -> None:
    """Remove this run's queue and cache keys from the shared Redis."""
    try:
        import redis

        client = redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(match=f"*{run_id}*", count=1000))
        if keys:
            client.delete(*keys)
    except Exception as error:  # noqa: BLE001 - cleaning up is best effort
        log(f"could not clean Redis: {error}")


def _run(
    profile: Profile, phases: set[str], database: Database, processes: Processes, workdir: Path, port: int, run_id: str
) -> dict[str, Any]:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from .shop import load_shop, previews_for

    result: dict[str, Any] = {}
    log("migrating")
    call_command("migrate", verbosity=0, interactive=False)
    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        result["postgres"] = cursor.fetchone()[0].split(" on ")[0]
        cursor.execute("SHOW synchronous_commit")
        result["synchronous_commit"] = cursor.fetchone()[0]
    log(f"loading the synthetic shop ({profile.customers} customers × {profile.orders_per_customer} orders)")
    t0 = time.monotonic()
    shop = load_shop(
        customers=profile.customers,
        orders_per_customer=profile.orders_per_customer,
        sessions_file=workdir / "sessions.tsv",
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    result["shop"] = {
        "customers": shop.customers,
        "orders": shop.orders,
        "agent_sessions": shop.sessions,
        "currencies": shop.currencies,
        "load_seconds": round(time.monotonic() - t0, 1),
    }
    log(f"  {result['shop']}")

    python = str(VENV_BIN / "python")
    processes.start("gunicorn", [python, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi:application"])
    bare_port = free_port()
    processes.start(
        "gunicorn-bare",
        [python, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi:application"],
        extra_env={"DJANGO_SETTINGS_MODULE": "bench.bare_settings", "GUNICORN_BIND": f"127.0.0.1:{bare_port}"},
    )
    processes.start("sealer", [python, "manage.py", "seal_audit", "--loop"])
    for i in (1, 2):
        processes.start(
            f"worker{i}",
            [
                python,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                # Every queue, as one worker did before the queues were split: the figures stay comparable.
                "-Q",
                ",".join(sorted({route["queue"] for route in settings.CELERY_TASK_ROUTES.values()})),
                "--concurrency=1",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=WARNING",
                "-n",
                f"{run_id}-w{i}@%h",
            ],
        )
    base_url = f"http://127.0.0.1:{port}"
    bare_url = f"http://127.0.0.1:{bare_port}"
    wait_for_http(base_url + "/api/agent/tools", shop.sample_token)
    wait_for_bare(bare_url + BARE_PATH, shop.sample_token)
    run_started = datetime.now(UTC)
    warm = previews_for(label="WARM", count=20)
    for preview in warm:
        _confirm(preview)
    _wait_executed([p.pk for p in warm], timeout=60)
    processes.check_alive()
    result["server"] = _server_description()
    if "commit" in phases:
        # The same set-up confirmations, before any other phase: compared with the commit phase's own
        # (docs/benchmarks.md, "The set-up confirmations").
        result["confirmations_before_proposals"] = time_confirmations(previews_for(label="CB", count=200))
        log(f"  set-up confirmations on the young database: {result['confirmations_before_proposals']}")
    log(f"gunicorn on {base_url} ({result['server']['gunicorn']}), two Celery workers ready")

    if "proposals" in phases:
        log(
            f"proposals: {profile.duration_s} s of each kind in {profile.slices} alternating slices, "
            f"each after {profile.warmup_s} s of warm-up"
        )
        urls = {"pipeline": base_url, "floor": base_url, "bare": bare_url}
        result["proposals"] = measure_proposals(profile, urls, shop, run_id, processes)
        processes.check_alive()
        capacity = result["proposals"]["pipeline"][str(TARGET_CONNECTIONS)]["rps"]
        log(
            f"open loop: proposals at half the capacity measured at {TARGET_CONNECTIONS} connections "
            f"({capacity} req/s), {profile.duration_s} s"
        )
        result["open_loop"] = measure_open_loop(profile, base_url, shop, run_id, capacity, workdir)
        log(f"  {result['open_loop']}")
        processes.check_alive()
    if "commit" in phases:
        log(f"commit pipeline: {profile.commit_batch} confirmations executed by two workers")
        throughput = measure_commit_throughput(profile, processes)
        log(f"  {throughput}")
        log(f"confirm → executed with idle workers: {profile.latency_samples} samples")
        latency = measure_confirm_latency(profile)
        log(f"  {latency}")
        floors = {}
        for name, (_script, _prefix, words) in COMMIT_FLOORS.items():
            log(f"commit floor ({words}): pgbench, {profile.floor_transactions} executions, 2 clients")
            floors[name] = measure_commit_floor(profile, database, clients=2, floor=name)
            log(f"  {floors[name]}")
        result["commit"] = {
            "throughput": throughput,
            "latency": latency,
            "floor": floors["state_machine"],
            "floor_one_transaction": floors["one_transaction"],
        }
        processes.check_alive()
    if "console" in phases:
        log(f"console: the queue with 10 and then {CONSOLE_WAITING:,} previews waiting for staff")
        result["console"] = measure_console(profile)
        for key, value in result["console"].items():
            log(f"  {key}: p50 {value['p50_ms']} ms, p95 {value['p95_ms']} ms, {value['queries']} queries")
    log("audit log: waiting for the sealer, then the seal lag of every record and verify_audit")
    verify = verify_audit_log()
    result["audit"] = {"verify": verify, "seal_lag": measure_seal_lag(run_started)}
    log(f"  {result['audit']}")
    return result


def _server_description() -> dict[str, Any]:
    """What served the run: gunicorn's settings as its config file computes them, the workers, and the
    database settings that matter for speed."""
    import importlib.util

    from django.conf import settings

    spec = importlib.util.spec_from_file_location("gunicorn_conf", ROOT / "config" / "gunicorn.conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    database = settings.DATABASES["default"]
    return {
        "gunicorn": {"workers": conf.workers, "worker_class": conf.worker_class, "threads": conf.threads},
        "celery": {
            "workers": 2,
            "concurrency": 1,
            "prefetch_multiplier": settings.CELERY_WORKER_PREFETCH_MULTIPLIER,
            "acks_late": settings.CELERY_TASK_ACKS_LATE,
            "db_reuse_max": getattr(settings, "CELERY_DB_REUSE_MAX", None),
        },
        "database": {
            "conn_max_age": database.get("CONN_MAX_AGE"),
            "conn_health_checks": database.get("CONN_HEALTH_CHECKS"),
        },
        "throttle": settings.AGENT_THROTTLE_RATE,
    }


if __name__ == "__main__":
    sys.exit(main())
