"""A web process serving one preview's receipt, for `make bench-scale`: started afresh for each size, so
that nothing a previous size read is cached in it.

    python -m bench.scale_receipts PREVIEW_ID [--calls 30]    (the agent's token in BENCH_SCALE_AGENT_TOKEN)

It sets Django up as a web process does (the benchmark's settings, DEBUG off), serves one request of
another endpoint (the URLconf, the first database connection), then GET /api/agent/previews/<id>/receipt
`--calls` times through Django's test client, and prints one line of JSON: the receipt's time (cold, the
median and p95 of the calls, the CPU per call of this process and of its PostgreSQL backend), the
statements and tiles one receipt reads, the process's RSS before and after the calls and its peak, and
whether the receipt checks (approvals.audit.log.receipt_check).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


def memory_kib() -> dict[str, int]:
    """VmRSS (now) and VmHWM (the peak) of this process, in KiB."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0])
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("preview")
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args(argv)
    token = os.environ["BENCH_SCALE_AGENT_TOKEN"]

    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from approvals.audit.log import receipt_check
    from approvals.audit.seal import public_key
    from approvals.models import AuditTile

    from .run import percentile
    from .scale_clock import CpuClock, cpu_per_call

    client = Client(headers={"Authorization": f"Bearer {token}"})
    warm = client.get("/api/agent/tools")
    if warm.status_code != 200:
        raise SystemExit(f"GET /api/agent/tools answered {warm.status_code}: {warm.content[:300]!r}")
    path = f"/api/agent/previews/{args.preview}/receipt"
    before = memory_kib()

    def get() -> tuple[float, dict]:
        started = time.perf_counter()
        response = client.get(path)
        spent = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise SystemExit(f"GET {path} answered {response.status_code}: {response.content[:300]!r}")
        return spent, response.json()

    cold, _receipt = get()
    clock = CpuClock()
    clock.start()
    times = [get()[0] for _ in range(args.calls)]
    own_cpu, backend_cpu = clock.stop()
    after = memory_kib()
    with CaptureQueriesContext(connection) as queries:
        _spent, receipt = get()
    tile_table = AuditTile._meta.db_table
    check = receipt_check(receipt, public_key())
    result = {
        "cold_ms": round(cold, 2),
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(percentile(times, 95), 2),
        **cpu_per_call(own_cpu, backend_cpu, args.calls),
        "calls": args.calls,
        "queries": len(queries),
        "tiles_read": sum(1 for query in queries.captured_queries if tile_table in query["sql"]),
        "rss_before_mib": round(before["VmRSS"] / 1024, 1),
        "rss_after_mib": round(after["VmRSS"] / 1024, 1),
        "rss_growth_mib": round((after["VmRSS"] - before["VmRSS"]) / 1024, 1),
        "peak_rss_mib": round(memory_kib()["VmHWM"] / 1024, 1),
        "tree_size": receipt["tree_head"]["size"] if receipt.get("tree_head") else None,
        "records": len(receipt["records"]),
        "leaf_indexes": [entry["leaf_index"] for entry in receipt["records"]],
        "unsealed_records": receipt["unsealed_records"],
        "valid": check.valid,
        "problems": list(check.problems),
        "body_bytes": len(json.dumps(receipt)),
    }
    print("SCALE_JSON " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
