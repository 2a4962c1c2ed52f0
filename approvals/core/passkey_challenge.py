"""The challenge a passkey signs when it approves previews: pure (no Django), so that an offline verifier
(approvals.audit.passkey_check) recomputes it from nothing but the nonce and the digests.

    challenge = SHA-256( b"approval-gateway-step-up/v1\\n"
                         || nonce                                  (32 random bytes, raw)
                         || b"\\n"
                         || digest_1 || b"\\n" || digest_2 || …    (each preview's digest as 64 lowercase
                                                                    hex characters, ASCII, in order) )

One preview is a list of one digest (then no newline follows it). A bulk decision's list is the ticked
previews' digests in the order the page posted them. The nonce has a fixed length and a digest is 64
hex characters, so no two (nonce, list) pairs encode to the same bytes. The 32-byte result is what the
browser passes to `navigator.credentials.get` as `challenge`, and what clientDataJSON's `challenge`
holds (base64url, unpadded).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

STEP_UP_DOMAIN = b"approval-gateway-step-up/v1\n"
# The JSON form of a kept signature (approvals.core.services.passkeys.signature_document), which
# approvals.audit.passkey_check verifies.
SIGNATURE_FORMAT = "approval-gateway-passkey-signature/v1"
NONCE_BYTES = 32
DIGEST = re.compile(r"^[0-9a-f]{64}$")


def step_up_challenge(nonce: bytes, digests: Sequence[str]) -> bytes:
    """The challenge over `nonce` and the ordered `digests`; raises ValueError for a nonce that is not 32
    bytes, an empty list, or a digest that is not 64 lowercase hex characters."""
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"the nonce must be {NONCE_BYTES} bytes, not {len(nonce)}")
    if not digests:
        raise ValueError("a step-up challenge commits to at least one digest")
    for digest in digests:
        if not isinstance(digest, str) or not DIGEST.match(digest):
            raise ValueError(f"not a preview digest (64 lowercase hex characters): {digest!r}")
    return hashlib.sha256(STEP_UP_DOMAIN + nonce + b"\n" + "\n".join(digests).encode("ascii")).digest()
