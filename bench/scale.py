"""`make bench-scale`: each cost at growing sizes of data, on PostgreSQL (docs/benchmarks.md, "make bench-scale").

    python -m bench.scale [--sizes 10k,1M] [--only audit|shop] [--rounds 3] [--keep-db] [--out FILE]

Each size gets a database of its own (`gateway_scale_<time>_<pid>_<part>_<size>`, a copy of one migrated
template, all dropped at the end unless --keep-db), loaded once; then each size is measured in rounds, the
sizes in alternating order (small to large, large to small, ...), each time by a Python process of its own,
and each figure is the median of its rounds. Two parts:

* **audit**, 10 thousand to 10 million leaves: N random leaf hashes written directly as the stored tiles,
  with a signed tree head at N (bench/scale_tiles.py). Each round proposes a refund through the agent API,
  confirms and executes it, and seals its audit records on top with `audit_seal()`; then measures its
  receipt (`GET /api/agent/previews/<id>/receipt`) in a fresh web process (bench/scale_receipts.py) with
  the statements and tiles it reads and the process's memory, `verify_audit` from the last checkpoint
  after 10 new records, a seal of 10 records and the sealer's records per second.
* **shop**, 10 thousand and 1 million rows per table (bench/scale_shop.py, COPY): a proposal, a
  confirmation, an execution, the console queue's first page and a search, a customer's orders page, in
  this process through Django's test client and the services; each the median of 30 calls, with its CPU
  (bench/scale_clock.py), its statement count and the EXPLAIN (ANALYZE, BUFFERS) of its slowest SELECT.

It prints a Markdown table per part (each cost at each size, its ratio to the smallest size) and writes
everything to bench/results/scale-<time>.json.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import platform
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlunsplit

from .run import BENCH, ROOT, VENV_BIN, CpuSteal, Database, _forget_queue, bench_environment, percentile

AUDIT_SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
SHOP_SIZES = (10_000, 1_000_000)
REPEATS = 30  # calls per cost (their median and p95), after WARMUP unmeasured ones
WARMUP = 4
PAGE_BUDGET_S = 30  # a page slower than a second is timed fewer times (at least 5)
SEALER_BATCH = 2000  # records in the seal the sealer's rate is read from (a round's; at most SEAL_BATCH_SIZE)
SMALL_BATCH, SMALL_ROUNDS = 10, 5
TARGET_RATIO = 1.5
# The run's start, the same in every process of it: the log's elapsed times count from there.
STARTED = float(os.environ.get("BENCH_SCALE_STARTED") or time.time())


def log(message: str) -> None:
    print(f"[bench-scale {time.strftime('%H:%M:%S')} +{time.time() - STARTED:5.0f}s] {message}", flush=True)


def parse_sizes(text: str) -> list[int]:
    """`10k,100k,1M,10M` or plain numbers."""
    sizes = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)\s*", part)
        if not match:
            raise argparse.ArgumentTypeError(f"not a size: {part!r} (10000, 10k, 1M)")
        sizes.append(int(match[1]) * {"": 1, "k": 1000, "m": 1_000_000}[match[2].lower()])
    return sorted(set(sizes))


class ScaleDatabase(Database):
    """A database of the run on DATABASE_URL's server, optionally a copy of a template."""

    def __init__(self, base_url: str, name: str) -> None:
        super().__init__(base_url)
        parts = self.server
        self.name = name
        self.url = urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))

    def create_from(self, template: str) -> None:
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{self.name}" TEMPLATE "{template}"')


# Measuring in a size's own process -------------------------------------------------------------------


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def explain(sql: str) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of a captured SELECT (Django's captured SQL has its values in it)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def measure(
    call: Callable[[int], Any], *, repeats: int = REPEATS, warmup: int = WARMUP, budget_s: float | None = None
) -> dict[str, Any]:
    """`call(i)` for i = 0, 1, ...: `warmup` unmeasured, `repeats` timed (median, p95, CPU per call), one
    more with its statements captured; and the plan of that call's slowest SELECT. With `budget_s`, a
    slow call is repeated fewer times (at least 5), about `budget_s` seconds' worth."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from .scale_clock import CpuClock, cpu_per_call

    last = 0.0
    for i in range(warmup):
        last = _timed(lambda i=i: call(i)) / 1000
    if budget_s is not None and last > 0:
        repeats = max(5, min(repeats, int(budget_s / last)))
    clock = CpuClock()
    clock.start()
    times = [_timed(lambda i=i: call(i)) for i in range(warmup, warmup + repeats)]
    own_cpu, backend_cpu = clock.stop()
    with CaptureQueriesContext(connection) as queries:
        call(warmup + repeats)
    captured = queries.captured_queries
    selects = [q for q in captured if q["sql"].lstrip().upper().startswith("SELECT")]
    slowest = max(selects, key=lambda q: float(q["time"]), default=None)
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(percentile(times, 95), 2),
        **cpu_per_call(own_cpu, backend_cpu, repeats),
        "calls": repeats,
        "queries": len(captured),
        "slowest_select": slowest["sql"][:3000] if slowest else None,
        "slowest_select_ms": round(float(slowest["time"]) * 1000, 2) if slowest else None,
        "explain": explain(slowest["sql"]) if slowest else None,
    }


def _no_broker() -> None:
    """Publishing to the broker is not what is measured: an execution is run here, in-process."""
    from celery.app.task import Task

    Task.delay = lambda self, *args, **kwargs: None  # type: ignore[method-assign]  # publishing is not measured


def _with_progress(rows: Iterable[Any], *, what: str, total: int, every: float = 10.0) -> Iterator[Any]:
    started, last, count = time.monotonic(), time.monotonic(), 0
    for row in rows:
        count += 1
        yield row
        if time.monotonic() - last >= every:
            last = time.monotonic()
            log(f"  {what}: {count:,} of about {total:,} ({count / total:.0%}), {last - started:.0f} s")


def _propose(client: Any, token: str, order_number: str, amount: int, key: str) -> Any:
    """A refund_order proposal through the agent API; returns the preview."""
    from approvals.models import Preview

    arguments = {"order_id": order_number, "amount_minor": amount, "reason": "damaged"}
    body = json.dumps({"name": "refund_order", "arguments": arguments})
    response = client.post(
        "/api/agent/tool-calls",
        body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
    )
    if response.status_code != 201:
        raise RuntimeError(f"the proposal answered {response.status_code}: {response.content[:500]!r}")
    return Preview.objects.select_related("actor").get(pk=response.json()["preview"]["id"])


def _confirm(preview: Any) -> None:
    from approvals.core.services import preview_approve
    from approvals.models import ApprovalRole

    preview_approve(preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest)


def _execute(preview: Any) -> None:
    from approvals.core.services import preview_execute
    from approvals.models import PreviewStatus

    done = preview_execute(preview_id=preview.pk, worker="bench-scale")
    if done is None or done.status != PreviewStatus.EXECUTED:
        raise RuntimeError(f"preview {preview.pk} was not executed: {done and done.status}")


def _audit_records(count: int, *, label: str) -> None:
    """`count` audit records in one committed transaction, as a service writes them (plain inserts)."""
    from django.db import transaction

    from approvals.models import AuditEvent, AuditRecord

    with transaction.atomic():
        AuditRecord.objects.bulk_create(
            [
                AuditRecord(
                    event=AuditEvent.SHOP_API_CALL,
                    subject_type="order",
                    subject_id=f"{label}-{i}",
                    raw_arguments=json.dumps({"order_id": f"{label}-{i}", "amount_minor": 500, "reason": "damaged"}),
                    result={"status": "ok", "call": i},
                )
                for i in range(count)
            ],
            batch_size=1000,
        )


@dataclass
class Sealed:
    records: int = 0
    seconds: float = 0.0  # in the seals that sealed something
    waited: float = 0.0  # for older transactions elsewhere on the server to end
    cpu_ms: float | None = 0.0  # this process's and its backend's, in the seals that sealed something


def _seal_committed(expected: int, timeout: float = 300) -> Sealed:
    """Seal until `expected` records are sealed. On PostgreSQL a record is sealed once no older
    transaction anywhere on the server is running: other databases' sessions on a shared server can hold
    that back, and that wait is counted apart."""
    from approvals.audit.seal import audit_seal

    from .scale_clock import CpuClock

    done, started, clock = Sealed(), time.monotonic(), CpuClock()
    while done.records < expected:
        clock.start()
        before = time.perf_counter()
        count = audit_seal()
        if count:
            done.seconds += time.perf_counter() - before
            done.records += count
            own, backend = clock.stop()
            done.cpu_ms = None if done.cpu_ms is None or backend is None else done.cpu_ms + own + backend
        elif time.monotonic() - started > timeout:
            raise RuntimeError(f"only {done.records} of {expected} records sealed after {timeout} s")
        else:
            time.sleep(0.02)
    done.waited = time.monotonic() - started - done.seconds
    return done


@dataclass
class Verified:
    ms: float
    cpu_ms: float | None
    queries: int
    said: str


def _verify_audit() -> Verified:
    """`manage.py verify_audit` (from the last verified checkpoint), which must find the log intact."""
    from io import StringIO

    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from .scale_clock import CpuClock

    out, clock = StringIO(), CpuClock()
    clock.start()
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        call_command("verify_audit", stdout=out, stderr=out)
        spent = (time.perf_counter() - started) * 1000
    own, backend = clock.stop()
    text = out.getvalue()
    if "Audit log intact" not in text:
        raise RuntimeError(f"verify_audit: {text}")
    cpu = own + backend if backend is not None else None
    return Verified(spent, cpu, len(queries), text.strip().splitlines()[0])


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if len(known) == len(values) and known else None


def audit_load(size: int) -> dict[str, Any]:
    """The tiles of `size` random leaf hashes and a signed tree head at `size`."""
    from django.db import connection

    from approvals.audit.log import now_ms
    from approvals.models import AuditTile

    from .scale_clock import CpuClock
    from .scale_tiles import random_leaf_chunks, tiles_of, tiles_write, tree_head_sign

    level0 = math.ceil(size / 256)
    log(f"audit {size:,}: {size:,} random leaf hashes written as tiles ({level0:,} leaf tiles and those above)")
    clock = CpuClock()
    clock.start()
    started = time.monotonic()
    rows = _with_progress(tiles_of(random_leaf_chunks(size, seed=size)), what="tiles", total=level0 + level0 // 255)
    tiles = tiles_write(rows)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {AuditTile._meta.db_table}")
        head = tree_head_sign(size, timestamp=now_ms())
        cursor.execute("SELECT pg_total_relation_size(%s)", [AuditTile._meta.db_table])
        table_bytes = cursor.fetchone()[0]
    own, backend = clock.stop()
    generated = {
        "seconds": round(time.monotonic() - started, 1),
        "cpu_seconds": round(own / 1000, 1),  # this process's: hashing, COPY's text
        "postgres_cpu_seconds": round(backend / 1000, 1) if backend is not None else None,
        "tiles": tiles,
        "table_mib": round(table_bytes / 2**20, 1),
        "root": head.root_hash,
    }
    log(
        f"  {tiles:,} tiles ({generated['table_mib']} MiB) and a signed tree head in {generated['seconds']} s "
        f"(CPU {generated['cpu_seconds']} s here, {generated['postgres_cpu_seconds']} s in PostgreSQL)"
    )
    _checkpoint()
    return {"generated": generated}


def _checkpoint() -> None:
    """Write what the load left in PostgreSQL's buffers out now, not during the first round's measurements."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")


def audit_measure(size: int, round_number: int) -> dict[str, Any]:
    """A preview proposed, confirmed and executed on top of the log, its records sealed; then its receipt
    in a fresh process, verify_audit after new records, small seals and the sealer's rate."""
    from datetime import date, timedelta

    from django.contrib.auth import get_user_model
    from django.test import Client

    from approvals.core.services import agent_session_create
    from approvals.models import AuditLeaf, AuditRecord, AuditTreeHead
    from refunds.models import Order, OrderStatus

    machine = CpuSteal()
    result: dict[str, Any] = {}
    customer = get_user_model().objects.create(
        username=f"scale-audit-{round_number}", email=f"audit{round_number}@scale.example.test"
    )
    order = Order.objects.create(
        number=f"SA-{round_number}",
        customer=customer,
        currency="EUR",
        total_minor=50_000,
        status=OrderStatus.DELIVERED,
        placed_at=date.today() - timedelta(days=20),
        delivered_at=date.today() - timedelta(days=15),
        payment_ref=f"pi_sa_{round_number}",
    )
    leaves_before = AuditTreeHead.objects.order_by("-size").values_list("size", flat=True).first() or 0
    _session, token = agent_session_create(user=customer, tools=["refund_order"])
    preview = _propose(Client(), token, order.number, 500, f"scale-audit-{round_number}")
    _confirm(preview)
    _execute(preview)
    unsealed = AuditRecord.objects.count() - AuditLeaf.objects.count()
    sealed = _seal_committed(unsealed)
    first = AuditLeaf.objects.filter(record__preview=preview).order_by("index").first()
    if first is None or first.index < leaves_before:
        raise RuntimeError("the preview's records were not sealed on top of the log")
    log(
        f"audit {size:,}, round {round_number + 1}: a preview proposed, confirmed and executed; "
        f"{sealed.records} records sealed on top of {leaves_before:,}"
    )
    if sealed.waited > 1:
        log(f"  (the seal waited {sealed.waited:.1f} s for older transactions elsewhere on the server to end)")

    completed = subprocess.run(
        [str(VENV_BIN / "python"), "-m", "bench.scale_receipts", str(preview.pk), "--calls", str(REPEATS)],
        cwd=ROOT,
        env={**os.environ, "BENCH_SCALE_AGENT_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((x for x in completed.stdout.splitlines() if x.startswith("SCALE_JSON ")), None)
    if completed.returncode or line is None:
        raise RuntimeError(f"the receipt process failed:\n{completed.stdout}\n{completed.stderr[-3000:]}")
    receipt = result["receipt"] = json.loads(line.removeprefix("SCALE_JSON "))
    if not receipt["valid"]:
        raise RuntimeError(f"the receipt does not check: {receipt['problems']}")
    log(
        f"  receipt (a fresh process, tree of {receipt['tree_size']:,}): p50 {receipt['p50_ms']} ms, "
        f"p95 {receipt['p95_ms']} ms, CPU {receipt['cpu_app_ms']} + {receipt['cpu_db_ms']} ms (web process + "
        f"PostgreSQL), {receipt['queries']} statements, {receipt['tiles_read']} tiles; "
        f"RSS {receipt['rss_before_mib']} -> {receipt['rss_after_mib']} MiB, peak {receipt['peak_rss_mib']} MiB"
    )

    _verify_audit()  # catch up with what earlier rounds sealed: each measured run then reads 10 new records
    verified = []
    for step in range(SMALL_ROUNDS):
        _audit_records(SMALL_BATCH, label=f"verify{round_number}-{step}")
        _seal_committed(SMALL_BATCH)
        verified.append(_verify_audit())
    result["verify_audit"] = {
        "p50_ms": round(statistics.median(v.ms for v in verified), 2),
        "cpu_ms": _median([v.cpu_ms for v in verified]),
        "max_ms": round(max(v.ms for v in verified), 2),
        "queries": max(v.queries for v in verified),
        "output": verified[-1].said,
    }
    small = []
    for step in range(SMALL_ROUNDS):
        _audit_records(SMALL_BATCH, label=f"small{round_number}-{step}")
        small.append(_seal_committed(SMALL_BATCH))
    result["small_seal"] = {
        "records": SMALL_BATCH,
        "p50_ms": round(statistics.median(s.seconds * 1000 for s in small), 2),
        "cpu_ms": _median([s.cpu_ms for s in small]),
    }
    _audit_records(SEALER_BATCH, label=f"rate{round_number}")
    rate = _seal_committed(SEALER_BATCH)
    result["sealer"] = {
        "batch": SEALER_BATCH,
        "records_per_s": round(rate.records / rate.seconds, 1),
        "cpu_ms_per_record": round(rate.cpu_ms / rate.records, 3) if rate.cpu_ms is not None else None,
    }
    log(
        f"  verify_audit after {SMALL_BATCH} new records {result['verify_audit']['p50_ms']} ms "
        f"(CPU {result['verify_audit']['cpu_ms']} ms, {result['verify_audit']['queries']} statements); a seal of "
        f"{SMALL_BATCH} records {result['small_seal']['p50_ms']} ms (CPU {result['small_seal']['cpu_ms']} ms); "
        f"the sealer {result['sealer']['records_per_s']:,.0f} records/s "
        f"(CPU {result['sealer']['cpu_ms_per_record']} ms a record)"
    )
    result["cpu_steal_percent"] = machine.percent()
    return result


def shop_load(size: int, shop_file: Path) -> dict[str, Any]:
    from django.db import connection

    from .scale_shop import load_scaled_shop
    from .shop import reviewer

    log(f"shop {size:,}: writing the shop's history with COPY")
    started = time.monotonic()
    shop = load_scaled_shop(size, progress=lambda message: log(f"  {message}"))
    loaded = time.monotonic() - started
    log(f"  written in {loaded:.0f} s; VACUUM ANALYZE (what autovacuum would have done by then)")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    _checkpoint()
    reviewer()
    shop_file.write_text(json.dumps(shop.as_json()))
    return {
        "load": {"seconds": round(loaded, 1), "vacuum_seconds": round(time.monotonic() - started - loaded, 1)},
        "rows": shop.counts,
    }


def shop_measure(size: int, round_number: int, shop_file: Path) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from .scale_shop import ScaledShop

    shop = ScaledShop.from_json(json.loads(shop_file.read_text()))
    machine = CpuSteal()
    User = get_user_model()
    client = Client()
    calls = WARMUP + REPEATS + 1
    probes = shop.probes[round_number * calls : (round_number + 1) * calls]
    if len(probes) < calls:
        raise RuntimeError(f"the shop has probe customers for {len(shop.probes) // calls} rounds")
    previews: list[Any] = []
    costs: dict[str, Any] = {}

    def propose(i: int) -> None:
        previews.append(_propose(client, probes[i].token, probes[i].order_number, 400, f"scale-{size}-{i}"))

    log(f"shop {size:,}, round {round_number + 1}: proposals, confirmations, executions")
    costs["proposal"] = measure(propose)
    costs["confirmation"] = measure(lambda i: _confirm(previews[i]))
    costs["execution"] = measure(lambda i: _execute(previews[i]))

    def page(client: Client, path: str, must_hold: str, **query: str) -> Callable[[int], None]:
        def get(_i: int) -> None:
            response = client.get(path, query)
            if response.status_code != 200 or must_hold.encode() not in response.content:
                raise RuntimeError(f"GET {path} {query}: {response.status_code}, {must_hold!r} not in the page")

        return get

    staff = Client()
    staff.force_login(User.objects.get(username="bench-reviewer"))
    log(f"  the console queue, a search ({shop.search_term}), a customer's orders page")
    costs["console_queue"] = measure(page(staff, "/console/", 'class="queue-row'), budget_s=PAGE_BUDGET_S)
    search = page(staff, "/console/", shop.search_term, q=shop.search_term)
    costs["console_search"] = measure(search, budget_s=PAGE_BUDGET_S)
    customer = Client()
    customer.force_login(User.objects.get(username=shop.history_customer))
    costs["orders_page"] = measure(page(customer, "/orders/", "S0"), budget_s=PAGE_BUDGET_S)
    log("  " + "; ".join(f"{name} {cost['p50_ms']} ms ({cost['queries']})" for name, cost in costs.items()))
    return {"costs": costs, "cpu_steal_percent": machine.percent()}


# The run -------------------------------------------------------------------------------------------


def _worker(args: argparse.Namespace) -> int:
    import django

    django.setup()
    _no_broker()
    from django.db import connection

    shop_file = Path(args.result).with_name(f"shop-{args.size}.json")
    if args.worker == "audit":
        result = audit_load(args.size) if args.phase == "load" else audit_measure(args.size, args.round)
    else:
        result = (
            shop_load(args.size, shop_file) if args.phase == "load" else shop_measure(args.size, args.round, shop_file)
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        result["postgres"] = cursor.fetchone()[0].split(" on ")[0]
    Path(args.result).write_text(json.dumps(result, indent=2, default=str))
    return 0


def combined(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from a size's rounds: each number the median of the rounds that have it (a CPU figure is
    None in a round whose connection changed), texts and lists the last round's."""
    out: dict[str, Any] = {}
    for key, last in rounds[-1].items():
        values = [r.get(key) for r in rounds]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if isinstance(last, dict):
            out[key] = combined([v for v in values if isinstance(v, dict)])
        elif numbers and all(v is None or v in numbers for v in values):
            out[key] = round(statistics.median(numbers), 2)
        else:
            out[key] = last
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=parse_sizes, help="sizes for the parts run (default: audit 10k,100k,1M,10M; shop 10k,1M)"
    )
    parser.add_argument("--only", choices=["audit", "shop"], help="one part only")
    parser.add_argument("--rounds", type=int, default=3, help="measurement rounds, the sizes alternating (default 3)")
    parser.add_argument("--keep-db", action="store_true", help="keep the databases afterwards")
    parser.add_argument("--out", type=Path, help="where to write the JSON result")
    parser.add_argument("--worker", choices=["audit", "shop"], help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=["load", "measure"], help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)

    parts = [args.only] if args.only else ["audit", "shop"]
    sizes = {part: args.sizes or list(AUDIT_SIZES if part == "audit" else SHOP_SIZES) for part in parts}
    base_url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    run_id = f"scale-{secrets.token_hex(4)}"
    prefix = f"gateway_scale_{datetime.now():%Y%m%d_%H%M%S}_{os.getpid()}"
    template = ScaleDatabase(base_url, f"{prefix}_template")
    env = {
        **os.environ,
        **bench_environment(template.url, run_id),
        "REDIS_URL": redis_url,
        "AUDIT_SIGNING_KEY": base64.b64encode(os.urandom(32)).decode(),  # the run's own, never printed
        "PYTHONUNBUFFERED": "1",
        "PYTHONWARNINGS": "ignore:No directory at:UserWarning",
        "BENCH_SCALE_STARTED": str(STARTED),
    }
    workdir = Path(tempfile.mkdtemp(prefix="gateway-scale-"))
    result: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "sizes": sizes,
        "rounds": args.rounds,
    }
    described = "; ".join(f"{part} at " + ", ".join(f"{size:,}" for size in sizes[part]) for part in parts)
    log(f"run {run_id}: {described}; {args.rounds} rounds; databases {prefix}_*")
    databases: dict[tuple[str, int], ScaleDatabase] = {}

    def worker(part: str, size: int, phase: str, round_number: int = 0) -> dict[str, Any]:
        out = workdir / f"{part}-{size}-{phase}-{round_number}.json"
        subprocess.run(
            [str(VENV_BIN / "python"), "-m", "bench.scale", "--worker", part, "--phase", phase, "--size", str(size)]
            + ["--round", str(round_number), "--result", str(out)],
            cwd=ROOT,
            # The same ids in every size's database (copies of one template): each size gets cache keys of
            # its own, or the throttles would count one size's calls against another's.
            env={**env, "DATABASE_URL": databases[part, size].url, "BENCH_RUN_ID": f"{run_id}-{part}-{size}"},
            check=True,
        )
        return json.loads(out.read_text())

    try:
        template.create()
        log("migrating the template database")
        subprocess.run(
            [str(VENV_BIN / "python"), "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
        )
        for part in parts:
            result[part] = {}
            loads = {}
            for size in sizes[part]:
                databases[part, size] = ScaleDatabase(base_url, f"{prefix}_{part}_{size}")
                databases[part, size].create_from(template.name)
                loads[size] = worker(part, size, "load")
            rounds: dict[int, list[dict[str, Any]]] = {size: [] for size in sizes[part]}
            for round_number in range(args.rounds):
                # Alternating order: a machine whose speed drifts weighs on the small and large sizes alike.
                order = sizes[part] if round_number % 2 == 0 else list(reversed(sizes[part]))
                for size in order:
                    rounds[size].append(worker(part, size, "measure", round_number))
            for size in sizes[part]:
                result[part][str(size)] = {
                    "size": size,
                    **loads[size],
                    **combined(rounds[size]),
                    "rounds": rounds[size],
                }
            log(f"{part}: done")
    finally:
        if args.keep_db:
            log(f"kept databases {template.name}, " + ", ".join(d.name for d in databases.values()))
        else:
            for database in [template, *databases.values()]:
                database.drop()
        _forget_queue(redis_url, run_id)
        for leftover in workdir.glob("*"):
            leftover.unlink()
        workdir.rmdir()
    result["seconds"] = round(time.time() - STARTED, 1)
    tables = report(result)
    result["tables"] = tables
    out = args.out or BENCH / "results" / f"scale-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print()
    for text in tables.values():
        print(text)
        print()
    log(f"took {result['seconds']} s; JSON result in {out}")
    return 0


# The report -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    value: Callable[[dict[str, Any]], float]
    format: str = "{:.1f}"
    rate: bool = False  # a larger value is the better one: its ratio is smallest ÷ largest


AUDIT_ROWS = [
    Row("receipt: median (ms)", lambda r: r["receipt"]["p50_ms"]),
    Row("receipt: CPU per receipt, web process + PostgreSQL (ms)", lambda r: r["receipt"]["cpu_ms"]),
    Row("receipt: p95 (ms)", lambda r: r["receipt"]["p95_ms"]),
    Row("receipt: statements", lambda r: r["receipt"]["queries"], "{:.0f}"),
    Row("receipt: tiles read", lambda r: r["receipt"]["tiles_read"], "{:.0f}"),
    Row("web process: peak RSS after the receipts (MiB)", lambda r: r["receipt"]["peak_rss_mib"]),
    Row(
        f"sealer: records per second (a seal of {SEALER_BATCH:,})",
        lambda r: r["sealer"]["records_per_s"],
        "{:,.0f}",
        True,
    ),
    Row("sealer: CPU per record, sealer + PostgreSQL (ms)", lambda r: r["sealer"]["cpu_ms_per_record"], "{:.3f}"),
    Row(f"a seal of {SMALL_BATCH} records (ms)", lambda r: r["small_seal"]["p50_ms"]),
    Row(f"a seal of {SMALL_BATCH} records: CPU (ms)", lambda r: r["small_seal"]["cpu_ms"]),
    Row(
        f"verify_audit from the last checkpoint, {SMALL_BATCH} new records (ms)", lambda r: r["verify_audit"]["p50_ms"]
    ),
    Row("verify_audit: CPU (ms)", lambda r: r["verify_audit"]["cpu_ms"]),
    Row("verify_audit: statements", lambda r: r["verify_audit"]["queries"], "{:.0f}"),
]
RSS_GROWTH_LIMIT_MIB = 5  # "flat": serving the receipts grows the process by less than this
SHOP_COSTS = {
    "proposal": "a proposal (POST /api/agent/tool-calls)",
    "confirmation": "a confirmation (preview_approve)",
    "execution": "an execution (preview_execute)",
    "console_queue": "console queue, first page",
    "console_search": "console search (an order number)",
    "orders_page": "a customer's orders page",
}


def ratio_of(first: float | None, last: float | None, *, rate: bool = False) -> float | None:
    """The largest size's cost over the smallest's (for a rate, the smallest's over the largest's)."""
    if first is None or last is None:
        return None
    if rate:
        first, last = last, first
    return last / first if first > 0 else None


def _ratio_text(ratio: float | None) -> str:
    return f"{ratio:.2f}" if ratio is not None else "—"


def _verdict(*ratios: float | None) -> str:
    """yes when every known ratio is within the target; which one is over it otherwise."""
    names = ["wall", "CPU"]
    over = [names[i] for i, ratio in enumerate(ratios) if ratio is not None and ratio > TARGET_RATIO]
    if not any(ratio is not None for ratio in ratios):
        return "—"
    if not over:
        return "yes"
    return "**no**" if len(over) == len([r for r in ratios if r is not None]) else f"{' and '.join(over)} **no**"


def audit_table(runs: list[dict[str, Any]]) -> str:
    lines = [["cost at N leaves"] + [f"{r['size']:,}" for r in runs] + ["largest ÷ smallest", "≤ 1.5"]]
    for row in AUDIT_ROWS:
        values = [row.value(r) for r in runs]
        ratio = ratio_of(values[0], values[-1], rate=row.rate)
        cells = [row.format.format(v) if v is not None else "—" for v in values]
        lines.append([row.label, *cells, _ratio_text(ratio), _verdict(ratio)])
    growth = [r["receipt"]["rss_growth_mib"] for r in runs]
    flat = "yes" if max(growth) < RSS_GROWTH_LIMIT_MIB else "**no**"
    label = f"web process: RSS growth over {REPEATS + 1} receipts (MiB)"
    lines.append([label, *[f"{g:.1f}" for g in growth], f"< {RSS_GROWTH_LIMIT_MIB} MiB", flat])
    lines.append(["generating the leaves as tiles (s)", *[f"{r['generated']['seconds']:.1f}" for r in runs], "", ""])
    lines.append(["tiles stored (MiB)", *[f"{r['generated']['table_mib']:,.1f}" for r in runs], "", ""])
    return _markdown(lines)


def shop_table(runs: list[dict[str, Any]]) -> str:
    header = ["cost at N rows: median ms · CPU ms (statements)", *[f"{r['size']:,}" for r in runs]]
    lines = [header + ["wall ratio", "CPU ratio", "≤ 1.5"]]
    for key, label in SHOP_COSTS.items():
        costs = [r["costs"][key] for r in runs]
        wall = ratio_of(costs[0]["p50_ms"], costs[-1]["p50_ms"])
        cpu = ratio_of(costs[0]["cpu_ms"], costs[-1]["cpu_ms"])
        verdict = _verdict(wall, cpu)
        if costs[0]["queries"] != costs[-1]["queries"]:
            verdict += f"; statements {costs[0]['queries']:.0f} → {costs[-1]['queries']:.0f}"
        cells = [f"{c['p50_ms']:.1f} · {_number(c['cpu_ms'])} ({c['queries']:.0f})" for c in costs]
        lines.append([label, *cells, _ratio_text(wall), _ratio_text(cpu), verdict])
    lines.append(["writing the shop (s)", *[f"{r['load']['seconds']:.0f}" for r in runs], "", "", ""])
    return _markdown(lines)


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def grown_plans(runs: list[dict[str, Any]]) -> str:
    """The slowest statement of each shop cost that grew more than 1.5×, with its plan at the largest size."""
    parts = []
    for key, label in SHOP_COSTS.items():
        ratio = ratio_of(runs[0]["costs"][key]["p50_ms"], runs[-1]["costs"][key]["p50_ms"])
        cpu = ratio_of(runs[0]["costs"][key]["cpu_ms"], runs[-1]["costs"][key]["cpu_ms"])
        if max(ratio or 0, cpu or 0) <= TARGET_RATIO:
            continue
        largest = runs[-1]["costs"][key]
        plan = "\n".join("    " + line for line in (largest["explain"] or "").splitlines())
        parts.append(
            f"{label} (wall {_ratio_text(ratio)}×, CPU {_ratio_text(cpu)}×): its slowest statement at "
            f"{runs[-1]['size']:,} rows, {largest['slowest_select_ms']} ms:\n\n"
            f"    {largest['slowest_select']}\n\n{plan}"
        )
    if not parts:
        return ""
    return "Costs that grew more than 1.5×, and the plan of their slowest statement:\n\n" + "\n\n".join(parts)


def report(result: dict[str, Any]) -> dict[str, str]:
    tables = {}
    for part, table in (("audit", audit_table), ("shop", shop_table)):
        if result.get(part):
            runs = [result[part][key] for key in sorted(result[part], key=int)]
            tables[part] = table(runs)
            if part == "shop" and (plans := grown_plans(runs)):
                tables["shop_plans"] = plans
    return tables


def _markdown(lines: list[list[str]]) -> str:
    numeric = sum(1 for cell in lines[0][1:] if cell[0].isdigit()) + lines[0].count("wall ratio")
    numeric += lines[0].count("CPU ratio") + lines[0].count("largest ÷ smallest")
    out = ["| " + " | ".join(lines[0]) + " |", "|---|" + "---:|" * numeric + "---|"]
    out += ["| " + " | ".join(line) + " |" for line in lines[1:]]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
