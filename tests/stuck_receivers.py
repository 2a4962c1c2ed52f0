"""Webhook receivers that misbehave on the wire, for the bulkhead tests: each accepts connections on
127.0.0.1, reads the request, then answers (or not) in its own bad way for `seconds`, and says when it is
done. They are written on raw sockets because a well-behaved HTTP server cannot drip a status line."""

from __future__ import annotations

import socket
import threading
import time


class StuckReceiver:
    """`mode`: `drip_body` (a 200 head, then one byte of a 100-byte body every `interval`), `drip_head`
    (the status line itself one byte at a time), `silent` (reads the request, never answers), `endless`
    (a 200, then a chunked body as fast as the client takes it). Each connection is held for `seconds`."""

    def __init__(self, mode: str, seconds: float, interval: float = 0.2) -> None:
        self.mode, self.seconds, self.interval = mode, seconds, interval
        self.requests = 0
        self.connections_done = 0
        self.hung_up_early = 0  # connections the client closed before the receiver was done
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/hooks/agent"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        early = False
        with connection:
            self._read_request(connection)
            with self._lock:
                self.requests += 1
            ends = time.monotonic() + self.seconds
            try:
                self._answer(connection, ends)
            except OSError:  # the client hung up
                early = True
        with self._lock:
            self.connections_done += 1
            self.hung_up_early += early

    def _answer(self, connection: socket.socket, ends: float) -> None:
        if self.mode == "silent":
            while time.monotonic() < ends and not self._closed:
                time.sleep(self.interval)
            return
        if self.mode == "drip_head":
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
                if time.monotonic() >= ends:
                    return
                connection.sendall(bytes([byte]))
                time.sleep(self.interval)
            return
        if self.mode == "drip_body":
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
            for _ in range(100):
                if time.monotonic() >= ends:
                    return
                connection.sendall(b".")
                time.sleep(self.interval)
            return
        if self.mode == "endless":
            connection.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"4000\r\n" + b"x" * 0x4000 + b"\r\n"
            while time.monotonic() < ends:
                connection.sendall(chunk)  # blocks while the client reads nothing; fails once it hangs up
            return
        raise ValueError(self.mode)

    @staticmethod
    def _read_request(connection: socket.socket) -> None:
        connection.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            part = connection.recv(65536)
            if not part:
                return
            data += part
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        while len(body) < length:
            part = connection.recv(65536)
            if not part:
                return
            body += part
        connection.settimeout(None)

    @property
    def still_stuck(self) -> bool:
        """Every connection it took is still being held."""
        with self._lock:
            return self.requests > 0 and self.connections_done == 0

    def close(self) -> None:
        self._closed = True
        self._listener.close()
