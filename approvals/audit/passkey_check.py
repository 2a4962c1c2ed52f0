"""Checking a kept passkey signature offline: no database and no Django, only the signature document (the
`passkey` of an approval's audit record, approval-gateway-passkey-signature/v1) and the digest of the
preview it approved. For verify_evidence and anyone holding an evidence bundle.

What is checked, each failure said in a sentence:
- the document is whole (every field, base64url bytes);
- the approved digest is one of the digests the challenge commits to;
- the challenge is recomputed from the nonce and the digests (approvals.core.passkey_challenge) and is
  the one clientDataJSON carries, for `webauthn.get`;
- the origin in clientDataJSON is one of the expected origins (by default the document's own), and the RP
  ID hash in authenticatorData is SHA-256 of the expected RP ID (by default the document's);
- the authenticator saw the person present and verified them (the UP and UV flags);
- the signature over authenticatorData and SHA-256(clientDataJSON) verifies with the kept public key
  (COSE), through py_webauthn's verify_authentication_response.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Sequence
from typing import Any

from webauthn import verify_authentication_response
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url, parse_authenticator_data, parse_client_data_json
from webauthn.helpers.exceptions import WebAuthnException

from approvals.core.passkey_challenge import SIGNATURE_FORMAT, step_up_challenge

BYTES_FIELDS = ("credential_id", "public_key", "authenticator_data", "client_data_json", "signature", "nonce")


def _bytes_fields(document: dict[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    values: dict[str, bytes] = {}
    problems = []
    for name in BYTES_FIELDS:
        value = document.get(name)
        try:
            if not isinstance(value, str) or not value:
                raise ValueError
            values[name] = base64url_to_bytes(value)
        except (ValueError, binascii.Error):
            problems.append(f"the signature's {name} is missing or not base64url")
    return values, problems


def passkey_signature_problems(
    document: Any,
    *,
    digest: str,
    rp_id: str | None = None,
    origins: Sequence[str] | None = None,
) -> list[str]:
    """Why `document` is not a valid passkey signature of the preview whose digest is `digest` (empty: it
    is). `rp_id` and `origins` are what the verifier expects of the gateway; by default, the document's."""
    if not isinstance(document, dict) or document.get("format") != SIGNATURE_FORMAT:
        return [f"not a passkey signature document ({SIGNATURE_FORMAT})"]
    values, problems = _bytes_fields(document)
    listed = document.get("digests")
    if not isinstance(listed, list) or not all(isinstance(d, str) for d in listed):
        return [*problems, "the signature's digests are not a list of digests"]
    digests: list[str] = listed
    if problems:
        return problems
    if digest not in digests:
        problems.append(f"the signature's challenge does not commit to this preview's digest {digest[:12]}…")
    try:
        challenge = step_up_challenge(values["nonce"], digests)
    except ValueError as error:
        return [*problems, f"the challenge cannot be recomputed: {error}"]
    expected_rp_id = rp_id if rp_id is not None else str(document.get("rp_id", ""))
    expected_origins = list(origins) if origins is not None else [str(document.get("origin", ""))]
    try:
        client_data = parse_client_data_json(values["client_data_json"])
        authenticator_data = parse_authenticator_data(values["authenticator_data"])
    except (WebAuthnException, ValueError, KeyError, TypeError):
        return [*problems, "clientDataJSON or authenticatorData cannot be read"]
    if client_data.challenge != challenge:
        problems.append("clientDataJSON's challenge is not the one recomputed from the nonce and the digests")
    if client_data.origin not in expected_origins:
        problems.append(f"clientDataJSON's origin {client_data.origin!r} is not one of {expected_origins}")
    if authenticator_data.rp_id_hash != hashlib.sha256(expected_rp_id.encode()).digest():
        problems.append(f"authenticatorData's RP ID hash is not that of {expected_rp_id!r}")
    if not authenticator_data.flags.up or not authenticator_data.flags.uv:
        problems.append("the authenticator did not verify the person (the UP and UV flags must be set)")
    if problems:
        return problems
    credential = {
        "id": bytes_to_base64url(values["credential_id"]),
        "rawId": bytes_to_base64url(values["credential_id"]),
        "type": "public-key",
        "response": {
            "clientDataJSON": document["client_data_json"],
            "authenticatorData": document["authenticator_data"],
            "signature": document["signature"],
        },
    }
    try:
        verify_authentication_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=expected_rp_id,
            expected_origin=expected_origins,
            credential_public_key=values["public_key"],
            credential_current_sign_count=0,
            require_user_verification=True,
        )
    except WebAuthnException as error:
        return [f"the signature does not verify with the kept public key: {error}"]
    return []
