"""The independent C2SP peers (aics-tlog, aics-witness) in their own virtual environment, `.venv-c2sp`
(`make c2sp-peers`; `make test` makes it first). They need Python 3.12 or newer; the project runs on 3.11."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
C2SP_BIN = ROOT / ".venv-c2sp" / "bin"
AICS_TLOG = C2SP_BIN / "aics-tlog"
AICS_WITNESS = C2SP_BIN / "aics-witness"


def peers_missing() -> str | None:
    """Why the peers can't run here, or None. Tests fail (not skip) on this: `make test` installs them."""
    for tool in (AICS_TLOG, AICS_WITNESS):
        if not tool.exists():
            return f"{tool} is missing: run `make c2sp-peers`"
    return None


def aics_tlog(*args: str, timeout: float = 60) -> tuple[int, dict]:
    """Run `aics-tlog ARGS`; its exit code and the one JSON object it prints."""
    problem = peers_missing()
    assert problem is None, problem
    done = subprocess.run([str(AICS_TLOG), *args], capture_output=True, text=True, timeout=timeout)
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
    except json.JSONDecodeError:
        report = {"raw": done.stdout}
    report.setdefault("stderr", done.stderr)
    return done.returncode, report
