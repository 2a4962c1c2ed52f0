"""A TCP fault proxy on a loopback port in front of one upstream: it passes bytes through, or adds
latency, or resets the connection in the middle of the answer, or holds it open and says nothing."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time

HOLD_MAX_SECONDS = 60.0  # a black-holed connection is closed after this, whatever the mode


class FaultProxy:
    MODES = ("pass", "latency", "reset", "blackhole")

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.mode = "pass"
        self.latency = 0.0
        self.resets = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.5)
        self.port = int(self._server.getsockname()[1])
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self._server.close()

    def set(self, mode: str, latency: float = 0.0) -> None:
        assert mode in self.MODES
        self.mode, self.latency = mode, latency

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client, self.mode), daemon=True).start()

    def _serve(self, client: socket.socket, mode: str) -> None:
        with contextlib.closing(client):
            if mode == "blackhole":
                client.settimeout(0.5)
                deadline = time.monotonic() + HOLD_MAX_SECONDS
                while time.monotonic() < deadline and not self._stopping.is_set() and self.mode == "blackhole":
                    try:
                        if not client.recv(65536):
                            return
                    except TimeoutError:
                        continue
                    except OSError:
                        return
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                return
            with contextlib.closing(upstream):
                forward = threading.Thread(target=_pump, args=(client, upstream, 0.0), daemon=True)
                forward.start()
                if mode == "reset":
                    # The request reached the provider; its answer is cut after its first bytes.
                    upstream.settimeout(10)
                    try:
                        first = upstream.recv(65536)
                        client.sendall(first[: max(1, len(first) // 2)])
                    except OSError:
                        pass
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.resets += 1
                    return
                _pump(upstream, client, self.latency if mode == "latency" else 0.0)
                forward.join(timeout=1)


def _pump(source: socket.socket, sink: socket.socket, delay: float) -> None:
    source.settimeout(30)
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            if delay:
                time.sleep(delay)
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
