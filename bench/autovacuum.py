"""Autovacuum's work, done by the runner when the PostgreSQL server has autovacuum off.

The benchmark measures the gateway as production runs it, and production's PostgreSQL runs autovacuum
(on by default). Some servers turn it off; this project's CI machines do (`autovacuum = off` in
/etc/postgresql/15/main/conf.d/90-ci.conf). Then nothing analyzes the tables a run writes, and a plan
cached while a table was small stays as it was while the table grows: a prepared statement's generic
plan, a foreign key's check. On 7 December the commit phase's set-up confirmations each ran five
sequential scans of `approvals_preview` (19,000 rows by then): plans cached by the warm-up's 20
previews, never replanned. A confirmation took 45 ms instead of 11, 35 ms of it PostgreSQL's CPU
(docs/benchmarks.md, "The set-up confirmations").

So when the server has autovacuum off, `AutovacuumStandIn` does what autovacuum would: every
`autovacuum_naptime`, each table of the run's database whose changes cross autovacuum's own thresholds
(the server's settings, the formulas of the PostgreSQL manual's "The Autovacuum Daemon") is vacuumed,
analyzed, or both. With autovacuum on it does nothing.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

SETTINGS_SQL = """
SELECT name, setting FROM pg_settings
WHERE name IN ('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_threshold', 'autovacuum_vacuum_scale_factor',
               'autovacuum_vacuum_insert_threshold', 'autovacuum_vacuum_insert_scale_factor',
               'autovacuum_analyze_threshold', 'autovacuum_analyze_scale_factor')
"""

# reltuples is -1 for a table never vacuumed or analyzed: autovacuum then counts it as empty.
TABLES_SQL = """
SELECT s.schemaname, s.relname, greatest(c.reltuples, 0), s.n_dead_tup, s.n_ins_since_vacuum, s.n_mod_since_analyze
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
"""


@dataclass(frozen=True)
class Thresholds:
    """The server's autovacuum settings."""

    naptime_s: float
    vacuum: float
    vacuum_scale: float
    insert: float
    insert_scale: float
    analyze: float
    analyze_scale: float

    @classmethod
    def from_settings(cls, settings: dict[str, str]) -> Thresholds:
        return cls(
            naptime_s=float(settings["autovacuum_naptime"]),
            vacuum=float(settings["autovacuum_vacuum_threshold"]),
            vacuum_scale=float(settings["autovacuum_vacuum_scale_factor"]),
            insert=float(settings["autovacuum_vacuum_insert_threshold"]),
            insert_scale=float(settings["autovacuum_vacuum_insert_scale_factor"]),
            analyze=float(settings["autovacuum_analyze_threshold"]),
            analyze_scale=float(settings["autovacuum_analyze_scale_factor"]),
        )

    def due(self, *, reltuples: float, dead: int, inserted: int, modified: int) -> tuple[bool, bool]:
        """(vacuum, analyze): what autovacuum would do to a table with these counts now."""
        insert_limit = self.insert + self.insert_scale * reltuples
        vacuum = dead > self.vacuum + self.vacuum_scale * reltuples or (self.insert >= 0 and inserted > insert_limit)
        return vacuum, modified > self.analyze + self.analyze_scale * reltuples


class AutovacuumStandIn:
    """Vacuums and analyzes the run's tables as autovacuum would, in a thread, when the server has it off."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.server_autovacuum = "unknown"
        self.thresholds: Thresholds | None = None
        self.passes = 0
        self.vacuumed: Counter[str] = Counter()
        self.analyzed: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.database_url, autocommit=True)

    def start(self) -> str:
        """Read the server's setting and, when autovacuum is off, start standing in for it; says which."""
        with self._connect() as conn:
            settings = dict(conn.execute(SETTINGS_SQL).fetchall())
        self.server_autovacuum = settings["autovacuum"]
        if self.server_autovacuum == "on":
            return "the server's autovacuum is on"
        self.thresholds = Thresholds.from_settings(settings)
        self._thread = threading.Thread(target=self._loop, name="autovacuum-stand-in", daemon=True)
        self._thread.start()
        return f"the server has autovacuum off: the runner does its work every {self.thresholds.naptime_s:g} s"

    def _loop(self) -> None:
        assert self.thresholds is not None
        while not self._stop.wait(self.thresholds.naptime_s):
            self.pass_once()

    def pass_once(self) -> None:
        """One of autovacuum's rounds over the database: each table that is due, vacuumed and/or analyzed."""
        from psycopg import sql

        assert self.thresholds is not None
        with self._connect() as conn:
            for schema, table, reltuples, dead, inserted, modified in conn.execute(TABLES_SQL).fetchall():
                vacuum, analyze = self.thresholds.due(
                    reltuples=reltuples, dead=dead, inserted=inserted, modified=modified
                )
                name = sql.Identifier(schema, table)
                if vacuum:
                    conn.execute(sql.SQL("VACUUM (ANALYZE) {}" if analyze else "VACUUM {}").format(name))
                    self.vacuumed[table] += 1
                elif analyze:
                    conn.execute(sql.SQL("ANALYZE {}").format(name))
                if analyze:
                    self.analyzed[table] += 1
        self.passes += 1

    def stop(self) -> dict[str, Any]:
        """Stop, and say what was done (for the run's JSON)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
        return {
            "server_autovacuum": self.server_autovacuum,
            "stood_in": self._thread is not None,
            "passes": self.passes,
            "vacuumed": dict(self.vacuumed),
            "analyzed": dict(self.analyzed),
        }
