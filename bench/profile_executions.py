"""Profile the commit path in-process: `python -m bench.profile_executions [--count N] [--rounds R] [--cprofile]`.

Creates a database of its own next to DATABASE_URL's (dropped afterwards), loads a small synthetic shop,
then, per round, confirms N previews (`preview_approve`, as the confirmation page does, its commit
callbacks included, with the broker's publish replaced by a no-op) and executes each one
(`preview_execute`, as the worker's task does, with the local gateway). It prints the statements of one
confirmation and one execution, and the CPU time per confirmation and per execution of this process and of
its PostgreSQL backend (the best of R rounds). The statement counts do not depend on the machine.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="previews confirmed and executed in a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cprofile", choices=["confirm", "execute"], default=None)
    parser.add_argument(
        "--publish", action="store_true", help="publish the executions to REDIS_URL's broker (a queue of its own)"
    )
    parser.add_argument("--orm-rows", action="store_true", help="the plain ORM instead of approvals.core.rows")
    parser.add_argument("--dump", default=None, help="with --cprofile, also write the raw stats here (pstats)")
    args = parser.parse_args()

    from .profiling import django_setup, profiling_database

    if args.publish:
        os.environ["REDIS_URL"] = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    database = profiling_database()
    try:
        django_setup(orm_rows=args.orm_rows)
        from celery.app.task import Task
        from django.core.management import call_command
        from django.db import connection, connections
        from django.test.utils import CaptureQueriesContext

        from approvals.core.services import preview_approve, preview_execute
        from approvals.models import ApprovalRole

        from .shop import load_shop, previews_for

        if not args.publish:
            Task.delay = lambda self, *a, **k: None  # type: ignore[method-assign]  # no broker: publishing not measured
        call_command("migrate", verbosity=0, interactive=False)
        load_shop(customers=400, orders_per_customer=1, sessions_file=Path(tempfile.mkdtemp()) / "sessions.tsv")

        def confirm(preview: Any) -> None:
            preview_approve(
                preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest
            )

        def execute(preview: Any) -> None:
            preview_execute(preview_id=preview.pk, worker="profile")

        warm = previews_for(label="PW", count=20)
        for preview in warm:
            confirm(preview)
            execute(preview)
        sample = previews_for(label="PS", count=1)[0]
        sample.actor  # noqa: B018
        for name, step in (("confirmation", confirm), ("execution", execute)):
            with CaptureQueriesContext(connection) as queries:
                step(sample)
            print(f"\none {name}: {len(queries)} statements")
            for query in queries.captured_queries:
                print(f"  {query['sql'][:160]}")

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = Path(f"/proc/{cursor.fetchone()[0]}/stat")

        def postgres_cpu() -> float:
            fields = backend.read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        profiler = cProfile.Profile(time.process_time) if args.cprofile else None
        best: dict[str, tuple[float, float, float]] = {}
        for round_number in range(args.rounds):
            previews = previews_for(label=f"P{round_number}", count=args.count)
            for preview in previews:
                preview.actor  # noqa: B018
            for name, step in (("confirm", confirm), ("execute", execute)):
                started, started_pg, started_wall = time.process_time(), postgres_cpu(), time.perf_counter()
                if profiler and args.cprofile == name:
                    profiler.enable()
                for preview in previews:
                    step(preview)
                if profiler and args.cprofile == name:
                    profiler.disable()
                spent = (
                    (time.process_time() - started) / args.count,
                    (postgres_cpu() - started_pg) / args.count,
                    (time.perf_counter() - started_wall) / args.count,
                )
                best[name] = min(best.get(name, spent), spent)
        for name, (cpu, cpu_pg, wall) in best.items():
            print(
                f"{name}: {cpu * 1000:.2f} ms CPU, PostgreSQL {cpu_pg * 1000:.2f} ms, wall {wall * 1000:.2f} ms "
                f"per preview (best of {args.rounds} rounds of {args.count})"
            )
        if profiler:
            stats = pstats.Stats(profiler)
            stats.sort_stats("cumulative").print_stats(70)
            stats.sort_stats("tottime").print_stats(30)
            if args.dump:
                stats.dump_stats(args.dump)
        connections.close_all()
    finally:
        database.drop()
        if args.publish:
            import redis

            redis.Redis.from_url(os.environ["REDIS_URL"]).delete(f"{os.environ['BENCH_RUN_ID']}-celery")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
