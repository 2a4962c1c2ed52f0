"""A software passkey for the tests: an EC P-256 key that answers registration and authentication options
as a browser would (the JSON py_webauthn parses), with the flags, counter, origin and RP ID a test picks."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

RP_ID = "shop.example.test"
ORIGIN = "https://shop.example.test"

FLAG_UP = 0x01
FLAG_UV = 0x04
FLAG_BE = 0x08
FLAG_BS = 0x10
FLAG_AT = 0x40


class SoftPasskey:
    """One credential on one authenticator. `sign_count` goes up by `count_step` per assertion (0: a synced
    passkey whose counter stays 0)."""

    def __init__(self, *, rp_id: str = RP_ID, origin: str = ORIGIN, count_step: int = 1) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = os.urandom(16)
        self.rp_id = rp_id
        self.origin = origin
        self.count_step = count_step
        self.sign_count = 0

    def cose_public_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return cbor2.dumps({1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")})

    def _authenticator_data(self, flags: int, rp_id: str | None, attested: bytes = b"") -> bytes:
        rp_id_hash = hashlib.sha256((rp_id or self.rp_id).encode()).digest()
        return rp_id_hash + bytes([flags]) + struct.pack(">I", self.sign_count) + attested

    def _client_data(self, kind: str, challenge: str, origin: str | None) -> bytes:
        body = {"type": kind, "challenge": challenge, "origin": origin or self.origin, "crossOrigin": False}
        return json.dumps(body, separators=(",", ":")).encode()

    def register(self, options: dict[str, Any], *, uv: bool = True, origin: str | None = None) -> str:
        """The JSON of navigator.credentials.create's answer to `options` (attestation `none`)."""
        attested = bytes(16) + struct.pack(">H", len(self.credential_id)) + self.credential_id + self.cose_public_key()
        flags = FLAG_UP | FLAG_AT | (FLAG_UV if uv else 0)
        authenticator_data = self._authenticator_data(flags, options.get("rp", {}).get("id"), attested)
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": authenticator_data})
        client_data = self._client_data("webauthn.create", options["challenge"], origin)
        return json.dumps(
            {
                "id": bytes_to_base64url(self.credential_id),
                "rawId": bytes_to_base64url(self.credential_id),
                "type": "public-key",
                "response": {
                    "clientDataJSON": bytes_to_base64url(client_data),
                    "attestationObject": bytes_to_base64url(attestation),
                    "transports": ["internal"],
                },
                "clientExtensionResults": {},
            }
        )

    def assertion(
        self,
        options: dict[str, Any],
        *,
        uv: bool = True,
        origin: str | None = None,
        rp_id: str | None = None,
        sign_count: int | None = None,
    ) -> str:
        """The JSON of navigator.credentials.get's answer to `options` (their challenge), signed."""
        self.sign_count = sign_count if sign_count is not None else self.sign_count + self.count_step
        flags = FLAG_UP | (FLAG_UV if uv else 0)
        authenticator_data = self._authenticator_data(flags, rp_id)
        client_data = self._client_data("webauthn.get", options["challenge"], origin)
        signature = self.key.sign(authenticator_data + hashlib.sha256(client_data).digest(), ec.ECDSA(hashes.SHA256()))
        return json.dumps(
            {
                "id": bytes_to_base64url(self.credential_id),
                "rawId": bytes_to_base64url(self.credential_id),
                "type": "public-key",
                "response": {
                    "clientDataJSON": bytes_to_base64url(client_data),
                    "authenticatorData": bytes_to_base64url(authenticator_data),
                    "signature": bytes_to_base64url(signature),
                },
                "clientExtensionResults": {},
            }
        )


def with_flipped_byte(assertion: str, field: str = "signature", index: int = 10) -> str:
    """The same assertion with one byte of `field` (of its response) changed."""
    body = json.loads(assertion)
    raw = bytearray(base64url_to_bytes(body["response"][field]))
    raw[index] ^= 0x01
    body["response"][field] = bytes_to_base64url(bytes(raw))
    return json.dumps(body)
