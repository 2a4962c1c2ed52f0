"""A local https server for Client ID Metadata Documents: a throwaway CA and a certificate for
127.0.0.1, and handlers a test sets per path (a document, a redirect, an oversized body)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA); returns (certificate, key) files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cimd-cert.pem", directory / "cimd-key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


@dataclass
class MetadataServer:
    base_url: str
    ca_file: str
    routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)

    def document(self, path: str, body: dict[str, Any], status: int = 200) -> str:
        """Serve `body` as JSON at `path`; returns its URL."""
        self.routes[path] = (status, {"Content-Type": "application/json"}, json.dumps(body).encode())
        return self.base_url + path

    def raw(self, path: str, status: int, headers: dict[str, str], body: bytes = b"") -> str:
        self.routes[path] = (status, headers, body)
        return self.base_url + path

    def client_document(self, path: str, redirect_uri: str, name: str = "Test assistant", **extra: Any) -> str:
        """A valid document for a public client at `path`, naming its own URL as client_id."""
        url = self.base_url + path
        return self.document(
            path,
            {
                "client_id": url,
                "client_name": name,
                "redirect_uris": [redirect_uri],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
                **extra,
            },
        )


@contextmanager
def metadata_server(directory: Path) -> Iterator[MetadataServer]:
    cert_file, key_file = _certificate(directory)
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            hits.append(self.path)
            status, headers, body = routes.get(self.path, (404, {"Content-Type": "text/plain"}, b"not found"))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        state = MetadataServer(f"https://127.0.0.1:{server.server_address[1]}", str(cert_file), routes, hits)
        yield state
    finally:
        server.shutdown()
        server.server_close()
