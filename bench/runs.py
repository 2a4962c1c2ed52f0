"""`make bench`: three full runs of bench.run, and each target read from the median of the three.

    python -m bench.runs [--runs 3] [--quick] [--out FILE]

A full run's ratios move by several points from one run to the next on the same code (the proposal ratio
has read 49–56 % against a 55 % target), so a verdict is taken from the median of three runs, each
measured as bench.run does (the kinds in alternating slices, each against its floors in the same run).
Beside each figure: every run's value, the spread (lowest to highest), and, for the proposals, both
kinds' CPU per request. A target whose runs fall on both sides of it is reported as undecided with its
spread: the machine cannot tell, and another run will not settle it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .run import BENCH, CONSOLE_WAITING, TARGET_CONNECTIONS, log


@dataclass(frozen=True)
class Figure:
    name: str
    unit: str  # "%" for ratios (read as fractions), "ms"
    read: Callable[[dict[str, Any]], float | None]
    target: float | None = None
    at_least: bool = True  # the target is a floor (≥); else a ceiling (<)

    def words(self) -> str:
        if self.target is None:
            return ""
        shown = f"{self.target:.0%}".replace("%", " %") if self.unit == "%" else f"{self.target:g} {self.unit}"
        return f"≥ {shown}" if self.at_least else f"< {shown}"

    def meets(self, value: float) -> bool:
        assert self.target is not None
        return value >= self.target if self.at_least else value < self.target


def _proposals(kind: str, result: dict[str, Any]) -> dict[str, Any] | None:
    return (result.get("proposals") or {}).get(kind, {}).get(str(TARGET_CONNECTIONS))


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def _proposal_ratio(floor: str) -> Callable[[dict[str, Any]], float | None]:
    def read(result: dict[str, Any]) -> float | None:
        pipe, base = _proposals("pipeline", result), _proposals(floor, result)
        return _ratio(pipe and pipe["rps"], base and base["rps"])

    return read


def _cpu_per_request(kind: str) -> Callable[[dict[str, Any]], float | None]:
    """CPU of every process of the run (gunicorn, PostgreSQL, Redis, the sealer) per request of a kind."""

    def read(result: dict[str, Any]) -> float | None:
        measured = _proposals(kind, result)
        return sum(measured["cpu_ms_per_request"].values()) if measured else None

    return read


def _commit_ratio(floor: str) -> Callable[[dict[str, Any]], float | None]:
    def read(result: dict[str, Any]) -> float | None:
        commit = result.get("commit") or {}
        if floor not in commit:
            return None
        return _ratio(commit["throughput"]["executions_per_s"], commit[floor]["tps"])

    return read


def _path(*keys: str) -> Callable[[dict[str, Any]], float | None]:
    def read(result: dict[str, Any]) -> float | None:
        value: Any = result
        for key in keys:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return float(value) if value is not None else None

    return read


FIGURES = (
    Figure(f"Proposals at {TARGET_CONNECTIONS} connections / the project floor", "%", _proposal_ratio("floor"), 0.55),
    Figure(f"Proposals at {TARGET_CONNECTIONS} connections / the bare floor", "%", _proposal_ratio("bare"), 0.25),
    Figure("  CPU per proposal, every process (ms)", "ms", _cpu_per_request("pipeline")),
    Figure("  CPU per project-floor request, every process (ms)", "ms", _cpu_per_request("floor")),
    Figure("  CPU per bare-floor request, every process (ms)", "ms", _cpu_per_request("bare")),
    Figure(
        "Proposals, open loop at half capacity: p99 (ms)",
        "ms",
        _path("open_loop", "latency_ms", "p99"),
        50,
        at_least=False,
    ),
    Figure("Commit pipeline / the state machine's floor", "%", _commit_ratio("floor"), 0.50),
    Figure("Commit pipeline / one transaction (reference)", "%", _commit_ratio("floor_one_transaction")),
    Figure(
        "Confirm → executed, idle workers: p95 (ms)",
        "ms",
        _path("commit", "latency", "p95_ms"),
        1000,
        at_least=False,
    ),
    Figure("Audit seal lag: p95 (ms)", "ms", _path("audit", "seal_lag", "p95_ms"), 2000, at_least=False),
    Figure(
        f"Console queue, {CONSOLE_WAITING:,} waiting: first page p95 (ms)",
        "ms",
        _path("console", f"waiting_{CONSOLE_WAITING}", "p95_ms"),
        100,
        at_least=False,
    ),
)


def _shown(figure: Figure, value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.0%}" if figure.unit == "%" else f"{value:.1f}"


def median_rows(results: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One row a figure: each run's value, the median, the spread, the target and the verdict."""
    rows = []
    for figure in FIGURES:
        values = [figure.read(result) for result in results]
        known = [v for v in values if v is not None]
        if not known:
            continue
        median = statistics.median(known)
        verdict = ""
        if figure.target is not None:
            sides = {figure.meets(v) for v in known}
            if len(sides) > 1:
                verdict = f"undecided (median {'meets' if figure.meets(median) else 'misses'} it)"
            else:
                verdict = "yes" if figure.meets(median) else "**no**"
        low, high = min(known), max(known)
        rows.append(
            {
                "figure": figure.name,
                "runs": " · ".join(_shown(figure, v) for v in values),
                "median": _shown(figure, median),
                "spread": f"{_shown(figure, low)}–{_shown(figure, high)}" if len(known) > 1 else "",
                "target": figure.words(),
                "met": verdict,
            }
        )
    return rows


def markdown(rows: list[dict[str, str]]) -> str:
    header = "| figure | each run | median | spread | target | met? |\n|---|---:|---:|---:|---|---|\n"
    return header + "".join(
        f"| {r['figure']} | {r['runs']} | {r['median']} | {r['spread']} | {r['target']} | {r['met']} |\n" for r in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="quick runs (bench.run --quick) instead of full ones")
    parser.add_argument("--out", type=Path, help="where to write the JSON of every run and the medians")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}"
    out = args.out or BENCH / "results" / f"median-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    results = []
    for number in range(1, args.runs + 1):
        run_out = out.with_name(f"{out.stem}-run{number}.json")
        log(f"run {number} of {args.runs}")
        argv_run = [sys.executable, "-m", "bench.run", "--out", str(run_out)] + (["--quick"] if args.quick else [])
        subprocess.run(argv_run, check=True, cwd=BENCH.parent)
        results.append(json.loads(run_out.read_text()))
    rows = median_rows(results)
    out.write_text(json.dumps({"runs": results, "medians": rows}, indent=2, default=str) + "\n")
    print()
    print(markdown(rows))
    log(f"{args.runs} runs took {time.time() - started:.0f} s; JSON in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
