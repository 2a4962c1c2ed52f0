"""The benchmark's own pieces, checked without running the benchmark: the open-loop generator counts
latency from each request's scheduled send time, and the seal lag is read from the tree heads."""

import asyncio
import json
import threading
import time
from collections import Counter
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer

import pytest
from django.utils import timezone

from bench.open_loop import Call, percentiles, proposal_calls, run_open_loop, slow_by_second


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    delay = 0.0

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.delay)
        body = b'{"ok":true}'
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _OneAtATime(HTTPServer):
    request_queue_size = 256  # waiting connections queue in the kernel, none refused


def _serve(server_class, delay, protocol="HTTP/1.1"):
    handler = type("Handler", (_Handler,), {"delay": delay, "protocol_version": protocol})
    server = server_class(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _call(index):
    return Call(body=b'{"n":%d}' % index, headers={"Idempotency-Key": f"k-{index}"})


def test_a_fast_server_answers_on_schedule_over_kept_alive_connections():
    server = _serve(ThreadingHTTPServer, 0.005)
    try:
        result = asyncio.run(
            run_open_loop(url=f"http://127.0.0.1:{server.server_port}/x", rate=100, seconds=1, make_call=_call)
        )
    finally:
        server.shutdown()
    assert result["requests"] == 100 and result["statuses"] == {"201": 100}
    assert result["latency_ms"]["p50"] >= 5  # the server's own 5 ms: latency runs from the scheduled send
    assert result["connections_opened"] < 100  # connections were used again
    # How late sends went out is reported, not bounded: on a loaded machine it is the machine's, not the
    # generator's (timing figures belong in the benchmark's report).
    assert result["send_lag_ms"]["p99"] >= 0


def test_requests_queued_behind_a_slow_server_are_charged_from_their_scheduled_time():
    """One request at a time, 20 ms each (50 a second), offered 100 a second for a second: the queue grows
    by 50 requests a second, so the last ones wait about half a second more than they are served. A
    closed loop would report about 20 ms × connections whatever the queue."""
    server = _serve(_OneAtATime, 0.02, protocol="HTTP/1.0")  # one connection at a time, closed after each
    try:
        result = asyncio.run(
            run_open_loop(url=f"http://127.0.0.1:{server.server_port}/x", rate=100, seconds=1, make_call=_call)
        )
    finally:
        server.shutdown()
    assert result["statuses"] == {"201": 100}, result
    assert result["latency_ms"]["max"] > 700  # the 100th, due at 990 ms, answered after about 2 s
    assert result["latency_ms"]["p50"] > 250
    assert result["send_lag_ms"]["p99"] < 50  # the generator itself kept to the schedule
    assert sum(result["over_50ms_by_second"].values()) > 50  # when the queued ones were due: second 0


async def _open_loop_against_a_recycling_server(*, answers_per_connection: int) -> dict:
    """A server that answers `answers_per_connection` requests on each connection (as keep-alive), then
    closes it when the next request arrives without answering it, as a recycled gunicorn worker closes
    its idle connections."""
    answered = 0

    async def handle(reader, writer):
        nonlocal answered
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                if served == answers_per_connection:
                    return
                served += 1
                answered += 1
                writer.write(b'HTTP/1.1 201 Created\r\nContent-Length: 11\r\n\r\n{"ok":true}')
                await writer.drain()
        except asyncio.IncompleteReadError:
            return
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        result = await run_open_loop(url=f"http://127.0.0.1:{port}/x", rate=50, seconds=1, make_call=_call)
    result["answered"] = answered
    return result


def test_a_request_on_a_kept_alive_connection_the_server_closed_is_sent_again_on_a_new_one():
    result = asyncio.run(_open_loop_against_a_recycling_server(answers_per_connection=1))
    assert result["statuses"] == {"201": 50}, result
    assert result["answered"] == 50
    assert result["resent_after_keepalive_close"] > 0
    assert result["connections_opened"] == 50  # each answer on a new connection: every reused one was closed


def test_a_new_connection_closed_without_an_answer_is_a_failure_not_sent_again():
    result = asyncio.run(_open_loop_against_a_recycling_server(answers_per_connection=0))
    assert result["statuses"] == {"0": 50}, result
    assert result["answered"] == 0
    assert result["resent_after_keepalive_close"] == 0


def test_the_open_loop_sends_the_closed_loops_mix_of_calls(tmp_path):
    """bench/proposals.lua's shares, so that "half the capacity" wrk measured is half of this workload's."""
    sessions = tmp_path / "sessions.tsv"
    sessions.write_text(
        "tok-a\tA-1:900:1,A-2:500:0\tA-3,A-4\tB-1\n"  # an early and a late delivered order, two closed
        "tok-b\tB-1:700:1,B-2:800:0\tB-3\tA-1\n"
    )
    make = proposal_calls(sessions, key_prefix="mix")
    kinds, keyed, as_string, seen, kept = Counter(), 0, 0, set(), []
    remaining = {"A-1": 900, "A-2": 500, "B-1": 700, "B-2": 800}
    owner = {"A": "tok-a", "B": "tok-b"}
    total = 20_000
    for index in range(total):
        call = make(index)
        envelope = json.loads(call.body)
        arguments = envelope["arguments"]
        if isinstance(arguments, str):
            as_string += 1
            arguments = json.loads(arguments)
            assert envelope["call_id"] == f"call_{index}" or id(call) in seen
        key = call.headers.get("Idempotency-Key")
        keyed += key is not None
        order, amount, reason = arguments["order_id"], arguments["amount_minor"], arguments["reason"]
        if id(call) in seen:
            kinds["replay"] += 1
            assert key is not None  # only keyed calls come again
        elif order.startswith("NOPE-") or owner[order[0]] != call.headers["Authorization"].split()[1]:
            kinds["unavailable"] += 1
        elif order in ("A-3", "A-4", "B-3"):
            kinds["not_refundable"] += 1
        elif amount == 0:
            kinds["zero"] += 1
        elif amount > remaining[order]:
            kinds["exceeds"] += 1
        elif reason == "late" and order in ("A-2", "B-2"):
            kinds["late_too_early"] += 1
        else:
            kinds["valid"] += 1
        seen.add(id(call))
        kept.append(call)  # alive, so that no later call gets its id
    shares = {kind: round(100 * n / total) for kind, n in kinds.items()}
    expected = {"valid": 72, "replay": 6, "unavailable": 4, "not_refundable": 4, "zero": 3, "exceeds": 6}
    for kind, share in expected.items():
        assert abs(shares[kind] - share) <= 1, shares
    assert abs(shares["late_too_early"] - 5) <= 1, shares
    assert abs(100 * keyed / total - 60) < 3 and abs(100 * as_string / total - 50) < 3


def test_percentiles():
    assert percentiles(list(range(1, 101))) == {"p50": 50, "p90": 90, "p95": 95, "p99": 99, "max": 100}
    assert percentiles([]) == {}


def test_slow_samples_are_counted_by_the_second_they_were_due_in():
    samples = [(0.1, 49.9), (0.2, 50.0), (0.9, 120.0), (2.5, 300.0), (2.99, 3.0)]
    assert slow_by_second(samples) == {0: 2, 2: 1}


@pytest.mark.postgres
def test_the_seal_lag_runs_from_the_transactions_last_record_to_its_first_signed_head(transactional_db):
    from django.db import transaction

    from approvals.core.services import audit_record
    from approvals.models import AuditEvent
    from bench.run import measure_seal_lag
    from tests.conftest import seal_all
    from tests.factories import UserFactory

    alice = UserFactory(username="alice")
    since = timezone.now()
    with transaction.atomic():
        audit_record(event=AuditEvent.PROPOSED, actor=alice)
        time.sleep(0.3)  # the rest of a long transaction: not seal lag
        audit_record(event=AuditEvent.CONFIRMED, actor=alice)
    time.sleep(0.1)
    seal_all()
    lag = measure_seal_lag(since - timedelta(seconds=1))
    assert lag["records"] == 2
    assert lag["p50_ms"] == lag["max_ms"]  # both from the transaction's last record
    assert 100 <= lag["max_ms"] < 30_000


def test_cpu_steal_is_the_steal_columns_share_of_the_window(monkeypatch):
    from bench import run

    # user nice system idle iowait irq softirq steal guest guest_nice, as /proc/stat gives them
    readings = iter([[100, 0, 50, 800, 10, 0, 0, 40], [160, 0, 80, 860, 10, 0, 0, 70]])
    monkeypatch.setattr(run.CpuSteal, "read", staticmethod(lambda: next(readings)))
    assert run.CpuSteal().percent() == 16.7  # 30 of the window's 180 ticks
    monkeypatch.setattr(run.CpuSteal, "read", staticmethod(lambda: None))
    assert run.CpuSteal().percent() is None
    assert run.steal_words(None) == "CPU steal ?" and run.steal_words(16.7) == "CPU steal 17 %"


def test_the_machine_reads_a_cpu_steal_figure_now():
    from bench import run

    reading = run.CpuSteal.read()
    assert reading is None or (len(reading) == 8 and all(ticks >= 0 for ticks in reading))


def test_the_report_lists_each_windows_cpu_steal():
    from bench import run

    waiting = f"waiting_{run.CONSOLE_WAITING}"
    result = {
        "open_loop": {"cpu_steal_percent": 2.5},
        "commit": {"throughput": {"cpu_steal_percent": 18.0}, "floor": {"cpu_steal_percent": None}},
        "console": {waiting: {"cpu_steal_percent": 0.0}},
    }
    assert run.machine_steal(result) == [
        ("open loop", 2.5),
        ("commit drain", 18.0),
        ("pgbench", None),
        ("console", 0.0),
    ]
    assert run.report_rows({}) == []  # nothing measured: no steal row either


def _run_result(pipeline_rps, floor_rps, bare_rps, executions_per_s, state_machine_tps, p99):
    from bench import run

    def kind(rps, cpu):
        return {str(run.TARGET_CONNECTIONS): {"rps": rps, "cpu_ms_per_request": cpu}}

    return {
        "proposals": {
            "pipeline": kind(pipeline_rps, {"gunicorn": 7.0, "postgres": 1.5}),
            "floor": kind(floor_rps, {"gunicorn": 3.0, "postgres": 1.0}),
            "bare": kind(bare_rps, {"gunicorn": 1.0}),
        },
        "open_loop": {"latency_ms": {"p99": p99}},
        "commit": {
            "throughput": {"executions_per_s": executions_per_s},
            "latency": {"p95_ms": 40.0},
            "floor": {"tps": state_machine_tps},
            "floor_one_transaction": {"tps": 600.0},
        },
    }


def test_three_runs_are_read_from_their_median_with_the_spread_and_an_undecided_target():
    from bench.runs import median_rows

    results = [
        _run_result(49, 100, 300, 100, 180, 40.0),
        _run_result(56, 100, 300, 110, 200, 45.0),
        _run_result(53, 100, 300, 90, 210, 60.0),
    ]
    rows = {row["figure"].strip(): row for row in median_rows(results)}
    project = rows["Proposals at 16 connections / the project floor"]
    assert project["runs"] == "49% · 56% · 53%" and project["median"] == "53%" and project["spread"] == "49%–56%"
    assert project["target"] == "≥ 55 %" and project["met"] == "undecided (median misses it)"
    bare = rows["Proposals at 16 connections / the bare floor"]
    assert bare["median"] == "18%" and bare["met"] == "**no**"
    assert rows["CPU per proposal, every process (ms)"]["median"] == "8.5"
    assert rows["CPU per project-floor request, every process (ms)"]["median"] == "4.0"
    commit = rows["Commit pipeline / the state machine's floor"]
    assert commit["runs"] == "56% · 55% · 43%" and commit["median"] == "55%"
    assert commit["met"] == "undecided (median meets it)"
    assert rows["Commit pipeline / one transaction (reference)"]["met"] == ""
    assert rows["Proposals, open loop at half capacity: p99 (ms)"]["met"] == "undecided (median meets it)"
    assert rows["Confirm → executed, idle workers: p95 (ms)"]["met"] == "yes"
    assert "Audit seal lag: p95 (ms)" not in rows  # not measured: no row


def test_the_stand_in_for_autovacuum_uses_autovacuums_own_thresholds():
    from dataclasses import replace

    from bench.autovacuum import Thresholds

    defaults = Thresholds(
        naptime_s=60, vacuum=50, vacuum_scale=0.2, insert=1000, insert_scale=0.2, analyze=50, analyze_scale=0.1
    )
    # A table analyzed while empty that has had 200 rows written since: analyzed, not yet vacuumed.
    assert defaults.due(reltuples=0, dead=0, inserted=200, modified=200) == (False, True)
    # 19,000 rows analyzed, 1,800 changed since: under 50 + 10 %, nothing to do.
    assert defaults.due(reltuples=19_000, dead=0, inserted=0, modified=1_800) == (False, False)
    assert defaults.due(reltuples=19_000, dead=3_900, inserted=0, modified=0) == (True, False)
    assert defaults.due(reltuples=19_000, dead=0, inserted=4_801, modified=4_801) == (True, True)
    inserts_off = replace(defaults, insert=-1)
    assert inserts_off.due(reltuples=0, dead=0, inserted=10**6, modified=0) == (False, False)


@pytest.mark.postgres
def test_the_stand_in_analyzes_a_table_that_grew_and_leaves_the_others(transactional_db):
    from django.db import connection
    from psycopg.conninfo import make_conninfo

    from bench.autovacuum import AutovacuumStandIn, Thresholds
    from tests.factories import OrderFactory, UserFactory

    def analyses(table: str) -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = %s", [table])
            return cursor.fetchone()[0]

    settings = connection.settings_dict
    conninfo = make_conninfo(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"] or "postgres",
        dbname=settings["NAME"],
    )
    alice = UserFactory(username="alice")
    before = analyses("refunds_order"), analyses("refunds_refund")
    for i in range(120):
        OrderFactory(number=f"o-{i}", customer=alice)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    stand_in = AutovacuumStandIn(conninfo)
    # 50 changes since the last analysis, whatever the table held before (the scale factor is the server's).
    stand_in.thresholds = Thresholds(
        naptime_s=60, vacuum=50, vacuum_scale=0.2, insert=-1, insert_scale=0.2, analyze=50, analyze_scale=0
    )
    deadline = time.monotonic() + 10
    while "refunds_order" not in stand_in.analyzed and time.monotonic() < deadline:  # counts reach the stats
        stand_in.pass_once()
        time.sleep(0.2)

    assert stand_in.analyzed["refunds_order"] == 1 and "refunds_refund" not in stand_in.analyzed
    assert (analyses("refunds_order"), analyses("refunds_refund")) == (before[0] + 1, before[1])
    assert stand_in.stop() == {
        "server_autovacuum": "unknown",
        "stood_in": False,
        "passes": stand_in.passes,
        "vacuumed": {},
        "analyzed": dict(stand_in.analyzed),
    }
