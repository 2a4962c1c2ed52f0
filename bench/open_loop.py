"""Open-loop load: requests sent at a constant arrival rate whatever the server's answers, each request's
latency counted from the time it was scheduled to be sent (so a server that stalls is charged for the
requests that queue up behind the stall: no coordinated omission, unlike a closed loop such as wrk's).

    python -m bench.open_loop --url http://127.0.0.1:8000/api/agent/tool-calls --rate 150 --seconds 20 \
        --sessions sessions.tsv

It sends the closed loop's mix of calls (bench/proposals.lua, ported in `proposal_calls`).

The generator is asyncio over the standard library (no package to install): request i is due at
start + i / rate; it goes out on an idle keep-alive connection, or on a new one when every connection is
busy (the number of connections is not capped, as arrivals in the wild are not). k6's
constant-arrival-rate executor and vegeta measure from the time a request actually went out, and neither
installs from the Debian or npm registries here (docs/benchmarks.md); `send_lag_ms` reports how late the
generator itself sent, which stays near zero unless the load machine is saturated.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SLOW_MS = 50


@dataclass(frozen=True)
class Call:
    body: bytes
    headers: dict[str, str]


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(share: float) -> float:
        return round(ordered[min(len(ordered) - 1, max(0, int(share * len(ordered) + 0.5) - 1))], 2)

    return {"p50": at(0.50), "p90": at(0.90), "p95": at(0.95), "p99": at(0.99), "max": round(ordered[-1], 2)}


def slow_by_second(samples: list[tuple[float, float]]) -> dict[int, int]:
    """How many (seconds into the window, milliseconds) samples took SLOW_MS or more, by whole second."""
    slow = Counter(int(at) for at, spent in samples if spent >= SLOW_MS)
    return dict(sorted(slow.items()))


class NoAnswer(ConnectionError):
    """The connection closed (or was reset) before a byte of the answer came."""


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, bool]:
    """Send one HTTP/1.1 request, read its answer; returns the status and whether the connection stays open."""
    try:
        writer.write(request)
        await writer.drain()
        status_line = await reader.readline()
    except ConnectionError as error:
        raise NoAnswer(str(error)) from error
    if not status_line:
        raise NoAnswer("connection closed")
    status = int(status_line.split()[1])
    length, keep_alive = 0, status_line.startswith(b"HTTP/1.1")
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection":
            keep_alive = value == "keep-alive" or (keep_alive and value != "close")
    if length:
        await reader.readexactly(length)
    return status, keep_alive


async def run_open_loop(
    *, url: str, rate: float, seconds: float, make_call: Callable[[int], Call], timeout: float = 10.0
) -> dict[str, Any]:
    """Send round(rate × seconds) POSTs to `url` at `rate` a second; latency from each one's scheduled time."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    loop = asyncio.get_running_loop()
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    opened = retried = 0
    latencies: list[tuple[float, float]] = []  # (scheduled seconds into the window, milliseconds)
    send_lags: list[float] = []
    statuses: dict[str, int] = {}
    count = max(1, round(rate * seconds))
    start = loop.time() + 0.2

    async def one(index: int) -> None:
        nonlocal opened, retried
        call = make_call(index)
        head = "".join(f"{name}: {value}\r\n" for name, value in call.headers.items())
        request = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(call.body)}\r\n{head}\r\n"
        ).encode() + call.body
        scheduled = start + index / rate
        delay = scheduled - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        send_lags.append((loop.time() - scheduled) * 1000)
        status, keep = 0, False
        connection = idle.pop() if idle else None
        try:
            try:
                if connection is None:
                    connection = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
                    opened += 1
                    reused = False
                else:
                    reused = True
                status, keep = await asyncio.wait_for(_exchange(*connection, request), timeout)
            except NoAnswer:
                if not reused or connection is None:
                    raise
                # A kept-alive connection the server closed as the request went out (gunicorn closes its
                # idle ones when a worker recycles after max_requests): unanswered, so sent again on a new
                # connection, as HTTP clients do (RFC 9112, 9.3.1); the latency still runs from the schedule.
                connection[1].close()
                retried += 1
                connection = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
                opened += 1
                status, keep = await asyncio.wait_for(_exchange(*connection, request), timeout)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            status, keep = 0, False
        latencies.append((index / rate, (loop.time() - scheduled) * 1000))
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if connection is not None:
            if keep:
                idle.append(connection)
            else:
                connection[1].close()

    began = loop.time()
    await asyncio.gather(*(one(index) for index in range(count)))
    took = loop.time() - max(began, start)
    for _reader, writer in idle:
        writer.close()
    return {
        "rate": rate,
        "requests": count,
        "achieved_rate": round(count / took, 1) if took > 0 else None,
        "latency_ms": percentiles([spent for _at, spent in latencies]),
        "send_lag_ms": percentiles(send_lags),
        "statuses": dict(sorted(statuses.items())),
        "connections_opened": opened,
        "resent_after_keepalive_close": retried,
        # When the slow answers came: a cluster points at a pause (a checkpoint, a recycled worker),
        # a spread at the server's CPU.
        f"over_{SLOW_MS}ms_by_second": slow_by_second(latencies),
    }


@dataclass
class _Session:
    token: str
    delivered: list[tuple[str, int]]  # (order number, remaining minor units)
    late: list[tuple[str, int]]  # delivered long enough ago for a "late" refund
    early: list[tuple[str, int]]  # delivered within the last 7 days
    closed: list[str]  # pending, shipped or cancelled
    foreign: str  # another customer's order


def _sessions(sessions_file: Path) -> list[_Session]:
    """bench/shop.py's sessions file: token, delivered "number:remaining:late_ok,...", other orders, and
    another customer's order, tab-separated (the format bench/proposals.lua reads)."""
    sessions = []
    for line in sessions_file.read_text().splitlines():
        token, delivered_field, closed_field, foreign = (line.split("\t") + ["", "", ""])[:4]
        session = _Session(token, [], [], [], [n for n in closed_field.split(",") if n], foreign)
        for entry in filter(None, delivered_field.split(",")):
            number, remaining, late_ok = entry.split(":")
            order = (number, int(remaining))
            session.delivered.append(order)
            (session.late if late_ok == "1" else session.early).append(order)
        if session.delivered:
            sessions.append(session)
    if not sessions:
        raise ValueError(f"no agent session with a delivered order in {sessions_file}")
    return sessions


def proposal_calls(sessions_file: Path, key_prefix: str, seed: int = 7) -> Callable[[int], Call]:
    """The calls bench/proposals.lua sends wrk, in the same mix, so that the open loop's rate ("half the
    pipeline's capacity") is a share of the capacity measured for this very workload:

        72 %  a valid proposal            6 %  the last keyed call again (an idempotent replay)
         4 %  order_unavailable           4 %  order_not_refundable
         3 %  zero_amount                 6 %  amount_exceeds_remaining
         5 %  reason_not_applicable

    Arguments go as a JSON string (with a call_id) or as an object, half each; 60 % carry an
    Idempotency-Key. The 422s are answers of the contract, as in the closed loop.
    """
    sessions = _sessions(sessions_file)
    rng = random.Random(seed)
    last_keyed: list[Call] = []

    def up_to(limit: int) -> int:
        return rng.randint(1, limit) if limit >= 1 else 1

    def call(index: int, session: _Session, order_id: str, amount: int, reason: str) -> Call:
        arguments = {"order_id": order_id, "amount_minor": amount, "reason": reason}
        if rng.random() < 0.5:
            envelope = {"name": "refund_order", "arguments": json.dumps(arguments), "call_id": f"call_{index}"}
        else:
            envelope = {"name": "refund_order", "arguments": arguments}
        body = json.dumps(envelope, separators=(",", ":")).encode()
        headers = {"Authorization": f"Bearer {session.token}"}
        if rng.random() < 0.6:
            headers["Idempotency-Key"] = f"{key_prefix}-{index}"
            made = Call(body=body, headers=headers)
            last_keyed[:] = [made]
            return made
        return Call(body=body, headers=headers)

    def make(index: int) -> Call:
        s = rng.choice(sessions)
        r = rng.randint(1, 100)
        if r <= 72 or (r > 95 and not s.early) or (82 < r <= 86 and not s.closed):
            number, remaining = rng.choice(s.delivered)
            reason = "unwanted" if rng.random() < 0.3 else "damaged"
            if s.late and rng.random() < 0.2:
                (number, remaining), reason = rng.choice(s.late), "late"
            return call(index, s, number, up_to(remaining) if remaining >= 1 else 0, reason)
        if r <= 78:
            if last_keyed:
                return last_keyed[0]
            number, remaining = rng.choice(s.delivered)
            return call(index, s, number, up_to(remaining), "damaged")
        if r <= 80:
            return call(index, s, s.foreign, 100, "damaged")
        if r <= 82:
            return call(index, s, f"NOPE-{rng.randint(1, 1_000_000)}", 100, "damaged")
        if r <= 86:
            return call(index, s, rng.choice(s.closed), 100, "damaged")
        if r <= 89:
            return call(index, s, rng.choice(s.delivered)[0], 0, "unwanted")
        if r <= 95:
            number, remaining = rng.choice(s.delivered)
            return call(index, s, number, remaining + rng.randint(1, 5000), "damaged")
        return call(index, s, rng.choice(s.early)[0], 100, "late")

    return make


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Open-loop constant-arrival-rate load; latency from schedule.")
    parser.add_argument("--url", required=True)
    parser.add_argument("--rate", type=float, required=True, help="requests a second")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--sessions", type=Path, required=True, help="bench/shop.py's sessions file")
    args = parser.parse_args(argv)
    calls = proposal_calls(args.sessions, key_prefix=f"open-{secrets.token_hex(4)}")
    print(json.dumps(asyncio.run(run_open_loop(url=args.url, rate=args.rate, seconds=args.seconds, make_call=calls))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
