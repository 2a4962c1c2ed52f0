"""Profile the proposal endpoint in-process: `python -m bench.profile_proposals [--calls N] [--rounds R] [--cprofile]`.

Creates a database of its own next to DATABASE_URL's (dropped afterwards), loads a small synthetic shop,
then posts keyed and unkeyed refund_order proposals through Django's WSGI handler (no HTTP server), and
prints the CPU time per call of each kind (the best of several rounds), the SQL statements one call
makes, and with --cprofile the functions that take the time (CPU time, not waits). Used to find the work
that stands between the endpoint and its floor (docs/benchmarks.md); the timings depend on the machine,
the statement counts do not.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any


def _environ(token: str, body: bytes, key: str | None) -> dict[str, Any]:
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/agent/tool-calls",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "HTTP_HOST": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(),
    }
    if key:
        environ["HTTP_IDEMPOTENCY_KEY"] = key
    return environ


def _package(filename: str) -> str:
    """`django/db`, `rest_framework`, `approvals/core/services.py`...: where a profiled function lives."""
    if "site-packages/" in filename:
        parts = filename.split("site-packages/", 1)[1].split("/")
        return "/".join(parts[:2]) if parts[0] == "django" else parts[0]
    if filename.startswith(str(Path(__file__).resolve().parent.parent)):
        return str(Path(filename).relative_to(Path(__file__).resolve().parent.parent))
    return "python" if "/lib/python3" in filename else filename


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls of each kind in a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--path", default="/api/agent/tool-calls")
    parser.add_argument("--dump", default=None, help="with --cprofile, also write the raw stats here (pstats)")
    parser.add_argument("--orm-rows", action="store_true", help="the plain ORM instead of approvals.core.rows")
    args = parser.parse_args()

    from .profiling import django_setup, profiling_database

    database = profiling_database()
    try:
        django_setup(orm_rows=args.orm_rows)
        from django.core.handlers.wsgi import WSGIHandler
        from django.core.management import call_command
        from django.db import connection, connections
        from django.test.utils import CaptureQueriesContext

        from .shop import load_shop

        call_command("migrate", verbosity=0, interactive=False)
        sessions_file = Path(tempfile.mkdtemp()) / "sessions.tsv"
        load_shop(customers=400, orders_per_customer=3, sessions_file=sessions_file)
        sessions = []
        for line in sessions_file.read_text().splitlines():
            token, delivered, *_ = line.split("\t")
            sessions.append((token, [entry.split(":") for entry in delivered.split(",")]))
        handler = WSGIHandler()
        rng = random.Random(1)

        def call(keyed: bool) -> int:
            token, delivered = rng.choice(sessions)
            number, remaining, _late = rng.choice(delivered)
            arguments = {
                "order_id": number,
                "amount_minor": rng.randint(1, max(1, int(remaining))),
                "reason": "damaged",
            }
            body = json.dumps({"name": "refund_order", "arguments": json.dumps(arguments)}).encode()
            key = f"k-{secrets.token_hex(8)}" if keyed else None
            environ = _environ(token, body, key)
            environ["PATH_INFO"] = args.path
            status: list[str] = []
            chunks = handler(environ, lambda s, h, *a: status.append(s))
            b"".join(chunks)
            return int(status[0].split()[0])

        for keyed in (True, False):
            for _ in range(50):
                call(keyed)
            with CaptureQueriesContext(connection) as queries:
                code = call(keyed)
            print(f"\n{'keyed' if keyed else 'unkeyed'} proposal ({code}): {len(queries)} statements")
            for query in queries.captured_queries:
                print(f"  {query['sql'][:150]}")

        def postgres_cpu() -> float:
            """CPU seconds of this connection's PostgreSQL backend (same machine): user + system."""
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backend = Path(f"/proc/{cursor.fetchone()[0]}/stat")
            fields = backend.read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        profiler = cProfile.Profile(time.process_time) if args.cprofile else None
        # Rounds of each kind, interleaved, and the best round reported: on a shared machine the other
        # tenants only ever add time, so the minimum is the steadiest estimate of the work itself.
        best: dict[bool, tuple[float, float]] = {}
        codes: dict[int, int] = {}
        for _round in range(args.rounds):
            for keyed in (True, False):
                started, started_pg = time.process_time(), postgres_cpu()
                if profiler:
                    profiler.enable()
                for _ in range(args.calls):
                    code = call(keyed)
                    codes[code] = codes.get(code, 0) + 1
                if profiler:
                    profiler.disable()
                spent = (time.process_time() - started) / args.calls, (postgres_cpu() - started_pg) / args.calls
                best[keyed] = min(best.get(keyed, spent), spent)
        for keyed, (spent, spent_pg) in best.items():
            print(
                f"{'keyed' if keyed else 'unkeyed'}: {spent * 1000:.2f} ms CPU per call, "
                f"PostgreSQL {spent_pg * 1000:.2f} ms (best of {args.rounds} rounds of {args.calls})"
            )
        print(f"answers: {codes}")
        if profiler:
            stats = pstats.Stats(profiler)
            if args.dump:
                stats.dump_stats(args.dump)
            stats.sort_stats("cumulative").print_stats(60)
            stats.sort_stats("tottime").print_stats(30)
            by_package: dict[str, float] = {}
            for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
                package = _package(filename)
                by_package[package] = by_package.get(package, 0.0) + tottime
            total = sum(by_package.values())
            print("own time by package (share of the profiled total):")
            for package, spent in sorted(by_package.items(), key=lambda item: -item[1])[:25]:
                print(f"  {package:40} {spent / total:6.1%}")
        connections.close_all()
    finally:
        database.drop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
