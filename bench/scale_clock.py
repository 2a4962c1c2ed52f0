"""CPU time of a measured cost for `make bench-scale`: this process's and its PostgreSQL backend's.

On a machine shared with other work, a call's wall time carries whatever else ran meanwhile; the CPU the
call itself spent (in Python, and in the PostgreSQL backend serving its connection, read from /proc: the
server must be on this machine) moves much less. The report gives both.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def _backend() -> tuple[int, Path]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = int(cursor.fetchone()[0])
    return pid, Path(f"/proc/{pid}/stat")


def _backend_seconds(stat: Path) -> float | None:
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None  # not on this machine, or the connection was replaced
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuClock:
    """`start()`, the calls, `stop()`: the CPU milliseconds they spent, this process's and its backend's
    (None for the backend's when it is not on this machine or the connection changed in between)."""

    def start(self) -> None:
        self._pid, self._stat = _backend()
        self._backend = _backend_seconds(self._stat)
        self._own = time.process_time()

    def stop(self) -> tuple[float, float | None]:
        own = (time.process_time() - self._own) * 1000
        pid, _stat = _backend()
        after = _backend_seconds(self._stat)
        if pid != self._pid or after is None or self._backend is None:
            return own, None
        return own, (after - self._backend) * 1000


def cpu_per_call(own_ms: float, backend_ms: float | None, calls: int) -> dict[str, float | None]:
    """CPU milliseconds per call: this process's, its PostgreSQL backend's, and both."""
    return {
        "cpu_ms": round((own_ms + (backend_ms or 0)) / calls, 2) if backend_ms is not None else None,
        "cpu_app_ms": round(own_ms / calls, 2),
        "cpu_db_ms": round(backend_ms / calls, 2) if backend_ms is not None else None,
    }
