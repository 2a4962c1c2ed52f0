"""Open-loop load: requests sent at a constant arrival rate whatever the server's answers, each request's
latency counted from the time it was scheduled to be sent (so a server that stalls is charged for the
requests that queue up behind the stall: no coordinated omission, unlike a closed loop such as wrk's).

    python -m bench.open_loop --url http://127.0.0.1:8000/api/agent/tool-calls --rate 150 --seconds 20 \
        --sessions sessions.tsv

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


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


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, bool]:
    """Send one HTTP/1.1 request, read its answer; returns the status and whether the connection stays open."""
    writer.write(request)
    await writer.drain()
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("connection closed")
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
    opened = 0
    latencies: list[float] = []
    send_lags: list[float] = []
    statuses: dict[str, int] = {}
    count = max(1, round(rate * seconds))
    start = loop.time() + 0.2

    async def one(index: int) -> None:
        nonlocal opened
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
            if connection is None:
                connection = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
                opened += 1
            status, keep = await asyncio.wait_for(_exchange(*connection, request), timeout)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            status, keep = 0, False
        latencies.append((loop.time() - scheduled) * 1000)
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
        "latency_ms": percentiles(latencies),
        "send_lag_ms": percentiles(send_lags),
        "statuses": dict(sorted(statuses.items())),
        "connections_opened": opened,
    }


def proposal_calls(sessions_file: Path, key_prefix: str, seed: int = 7) -> Callable[[int], Call]:
    """Valid refund proposals from the benchmark shop's sessions file (bench/shop.py): a random agent
    session, one of its delivered orders, a small amount, a fresh Idempotency-Key."""
    sessions = []
    for line in sessions_file.read_text().splitlines():
        fields = line.split("\t")
        orders = [entry.split(":")[0] for entry in fields[1].split(",") if entry] if len(fields) > 1 else []
        if orders:
            sessions.append((fields[0], orders))
    if not sessions:
        raise ValueError(f"no agent session with a delivered order in {sessions_file}")
    rng = random.Random(seed)

    def make(index: int) -> Call:
        token, orders = rng.choice(sessions)
        arguments = {"order_id": rng.choice(orders), "amount_minor": rng.randint(1, 50), "reason": "damaged"}
        body = json.dumps({"name": "refund_order", "arguments": arguments}, separators=(",", ":")).encode()
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": f"{key_prefix}-{index}"}
        return Call(body=body, headers=headers)

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
