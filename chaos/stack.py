"""The campaign's processes: a PostgreSQL cluster with a synchronous standby, Redis, the gateway's own."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG_BIN = Path(os.environ.get("CHAOS_PG_BIN", "/usr/lib/postgresql/15/bin"))
LOOPBACK = "127.0.0.1"
STANDBY_NAME = "standby1"
DATABASE = "gateway"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(interval)
    return False


def _as_postgres() -> list[str]:
    """Commands run as the `postgres` user when this process is root (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class PgNode:
    def __init__(self, cluster: PgCluster, name: str) -> None:
        self.cluster, self.name = cluster, name
        self.port = free_port()
        self.data = cluster.base / name

    def pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.cluster.run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args], check=check)

    def start(self) -> None:
        log = self.cluster.base / f"{self.name}.log"
        started = self.pg_ctl("-l", str(log), "-w", "-t", "60", "-o", f"-p {self.port}", "start", check=False)
        if started.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{self.name} did not start: {started.stdout}{started.stderr}\n{tail}")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster; its backends notice and exit (any still there after 10 s are killed)."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        children = _children(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if not wait_for(lambda: not any(_alive(child) for child in children), timeout=10):
            for child in children:
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        wait_for(lambda: not _alive(pid), timeout=10)
        # Where nothing reaps the killed postmaster (a container's init), it stays a zombie that the next
        # postmaster would take for a live one: its lock file goes with it.
        (self.data / "postmaster.pid").unlink(missing_ok=True)

    def sql(self, statement: str) -> str:
        return self.cluster.run(
            [str(PG_BIN / "psql"), "-h", LOOPBACK, "-p", str(self.port), "-U", "postgres", "-At", "-c", statement]
        ).stdout.strip()

    def accepts_writes(self) -> bool:
        return self.sql("SELECT pg_is_in_recovery()") == "f"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class PgCluster:
    """A primary and a synchronous streaming standby (pg_basebackup), throwaway, on free loopback ports."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="chaos-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        self.primary = PgNode(self, "node1")
        self.standby: PgNode | None = PgNode(self, "node2")
        self.nodes = [self.primary, self.standby]

    def run(self, command: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*_as_postgres(), *command], check=check, capture_output=True, text=True, timeout=120, cwd=self.base
        )

    def database_url(self) -> str:
        hosts = ",".join(f"{LOOPBACK}:{node.port}" for node in self.nodes)
        return f"postgres://postgres@{hosts}/{DATABASE}?target_session_attrs=read-write&connect_timeout=3"

    def create(self) -> None:
        node = self.primary
        self.run(
            [str(PG_BIN / "initdb"), "-D", str(node.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]
        )
        with open(node.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = '{LOOPBACK}'\nunix_socket_directories = ''\n"
                "wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\n"
                "max_connections = 100\nshared_buffers = 32MB\nsynchronous_commit = on\n"
                # The faults are processes killed, not machines losing power: what the kernel holds survives
                # them, so the campaign does not pay for fsync on a shared machine.
                "fsync = off\nfull_page_writes = off\n"
            )
        node.start()
        node.sql(f"CREATE DATABASE {DATABASE}")

    def standby_add(self) -> None:
        """The standby, from a base backup of the primary as it is now, made synchronous."""
        node = self.primary
        assert self.standby is not None
        standby = self.standby
        self.run(
            [
                str(PG_BIN / "pg_basebackup"),
                "-h",
                LOOPBACK,
                "-p",
                str(node.port),
                "-U",
                "postgres",
                "-D",
                str(standby.data),
                "-R",
                "-X",
                "stream",
                "--no-sync",
                "-c",
                "fast",
            ]
        )
        with open(standby.data / "postgresql.auto.conf", "a") as conf:
            conf.write(
                f"primary_conninfo = 'host={LOOPBACK} port={node.port} user=postgres application_name={STANDBY_NAME}'\n"
            )
        standby.start()
        # An acknowledged COMMIT is on the standby's disk too: it survives the primary's loss.
        node.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        node.sql("SELECT pg_reload_conf()")
        assert wait_for(lambda: node.sql("SELECT sync_state FROM pg_stat_replication") == "sync", timeout=30), (
            "the standby did not become synchronous"
        )

    def failover(self) -> PgNode:
        """The primary killed, the standby promoted; the new primary has no standby to wait for."""
        assert self.standby is not None, "one failover per campaign: the standby is used up"
        old, new = self.primary, self.standby
        old.kill()
        new.pg_ctl("-w", "promote")
        assert wait_for(new.accepts_writes, timeout=30), "the standby was not promoted"
        new.sql("ALTER SYSTEM SET synchronous_standby_names = ''")
        new.sql("SELECT pg_reload_conf()")
        self.primary, self.standby = new, None
        return new

    def stop(self) -> None:
        for node in self.nodes:
            if node.postmaster_pid() is not None:
                node.pg_ctl("-m", "immediate", "stop", check=False)
        shutil.rmtree(self.base, ignore_errors=True)


class Redis:
    """redis-server without persistence: a kill loses every message it held."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert wait_for(self.answers, timeout=10), "redis-server did not start"

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def answers(self) -> bool:
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False


class Processes:
    """The gateway's processes, each in its own process group, logging to files under `logs`."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, list[str]] = {}

    def start(self, name: str, command: list[str]) -> None:
        self.commands[name] = command
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - kept open by the child
        self.running[name] = subprocess.Popen(
            command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def kill(self, name: str) -> None:
        """SIGKILL the process and its group (a worker's pool, gunicorn's workers)."""
        process = self.running.pop(name)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)

    def restart(self, name: str) -> None:
        if name in self.running:
            self.kill(name)
        self.start(name, self.commands[name])

    def pid(self, name: str) -> int:
        return self.running[name].pid

    def stop_all(self) -> None:
        for name in list(self.running):
            process = self.running[name]
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for name in list(self.running):
            try:
                self.running[name].wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill(name)
        self.running.clear()


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "config", *args]
