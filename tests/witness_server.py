"""A real, third-party c2sp.org/tlog-witness for the tests: `aics-witness` (from `.venv-c2sp`, see
tests/c2sp.py) run as a process of its own, in a directory of its own, on a free port."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

from tests.c2sp import AICS_WITNESS, peers_missing


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AicsWitness:
    """One witness: `init --name`, then `add-log` for each (origin, log vkey), then `serve`.
    `initial` pins a checkpoint (size, base64 root) for the first log, as its operator would when
    joining a running log: the witness then holds that state and answers 409 with its size."""

    def __init__(
        self,
        directory: Path,
        name: str,
        logs: list[tuple[str, str]],
        initial: tuple[int, str] | None = None,
    ) -> None:
        problem = peers_missing()
        assert problem is None, problem
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.config = directory / "witness.json"
        self.name = name
        self.vkey = self._run("init", "--name", name).strip().splitlines()[-1]
        for origin, vkey in logs:
            self._run("add-log", "--origin", origin, "--vkey", vkey)
        if initial is not None:
            config = json.loads(self.config.read_text())
            config["logs"][0]["initial"] = {"size": initial[0], "root": initial[1]}
            self.config.write_text(json.dumps(config))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/add-checkpoint"
        self.process: subprocess.Popen | None = None

    def _run(self, *args: str) -> str:
        done = subprocess.run(
            [str(AICS_WITNESS), args[0], "--config", str(self.config), *args[1:]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def entry(self) -> str:
        """This witness as an AUDIT_WITNESSES entry."""
        return f"{self.vkey}={self.url}"

    def start(self) -> AicsWitness:
        log = (self.directory / "serve.log").open("ab")
        self.process = subprocess.Popen(
            [str(AICS_WITNESS), "serve", "--config", str(self.config), "--listen", f"127.0.0.1:{self.port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"aics-witness did not listen on {self.port}: {self.log()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def status(self) -> dict:
        return json.loads(self._run("status", "--json"))

    def log(self) -> str:
        path = self.directory / "serve.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def monitored_checkpoint(self, origin: str) -> str:
        """The witness's own view (`GET <sha256(origin)>/checkpoint`): the log's signatures and its own."""
        import hashlib
        import urllib.request

        digest = hashlib.sha256(origin.encode()).hexdigest()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/{digest}/checkpoint", timeout=5) as answer:  # noqa: S310
            return answer.read().decode()
