"""The audit log as a verifiable, append-only log (as Certificate Transparency builds one): each audit
record is a leaf of a Merkle tree (RFC 9162 hashing), and signed tree heads commit to the tree's size
and root. Everything here is pure: no database, so that `manage.py verify_receipt` checks a receipt
with nothing but the public key. The C2SP formats (checkpoint notes, tiles, tlog proofs) are in
approvals.audit.tlog; receipts carry both.

One canonical encoding of a record, RFC 8785 (JSON Canonicalization Scheme, the `rfc8785` package),
is used to hash a record when it is sealed, when `verify_audit` checks it and when a receipt is checked.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pymerkle import BaseMerkleTree, InclusionProof, InvalidProof, verify_consistency, verify_inclusion

from approvals.audit import tlog
from approvals.core.digests import AuditEncodingError, canonical_bytes

# Signed tree heads name the log they belong to, so that a signature made for one can't be used for another.
LOG_ID = "approval-gateway-audit/v1"
RECEIPT_FORMAT = "approval-gateway-audit-receipt/v2"
RECEIPT_FORMAT_V1 = "approval-gateway-audit-receipt/v1"  # pymerkle's proofs; still checked
EMPTY_ROOT = hashlib.sha256(b"").digest()  # RFC 9162: the hash of an empty tree


def record_content(record: Any) -> dict[str, Any]:
    """What a stored audit record says, as hashed into its leaf and given in a receipt."""
    return {
        "id": record.pk,
        "created_at": record.created_at.astimezone(UTC).isoformat(timespec="microseconds"),
        "event": record.event,
        "action": record.action,
        "preview": str(record.preview_id) if record.preview_id else None,
        "actor": record.actor_id,
        "agent_session": record.agent_session_id,
        "subject_type": record.subject_type,
        "subject_id": record.subject_id,
        "raw_arguments": record.raw_arguments,
        "approval_basis": record.approval_basis,
        "result": record.result,
    }


def leaf_hash(content: dict[str, Any]) -> bytes:
    """RFC 9162 leaf hash: SHA-256(0x00 || canonical record)."""
    return hashlib.sha256(b"\x00" + canonical_bytes(content)).digest()


class LeafTree(BaseMerkleTree):
    """pymerkle's tree over leaf hashes in memory: the proofs of receipts in format v1 (issued before the
    log was stored as tiles) are pymerkle's, and `receipt_check` still checks them. Its roots and proofs
    are RFC 9162's: leaves hashed with 0x00, nodes with 0x01, a tree of n leaves split at the largest
    power of two below n. The gateway itself no longer builds one (approvals.audit.tiles)."""

    def __init__(self, leaves: Iterable[bytes] = ()) -> None:
        self._leaves: list[bytes] = list(leaves)
        super().__init__(algorithm="sha256")

    # pymerkle's storage interface (indexes from one, offsets from zero)
    def _encode_entry(self, data: bytes) -> bytes:
        return data

    def _store_leaf(self, data: bytes, digest: bytes) -> int:
        self._leaves.append(digest)
        return len(self._leaves)

    def _get_leaf(self, index: int) -> bytes:
        return self._leaves[index - 1]

    def _get_leaves(self, offset: int, width: int) -> list[bytes]:
        return self._leaves[offset : offset + width]

    def _get_size(self) -> int:
        return len(self._leaves)

    # ours (leaf indexes from zero, as RFC 9162 counts them)
    @property
    def size(self) -> int:
        return len(self._leaves)

    def extend(self, digests: Iterable[bytes]) -> None:
        self._leaves.extend(digests)

    def leaf(self, index: int) -> bytes:
        return self._leaves[index]

    def root(self, size: int | None = None) -> bytes:
        size = self.size if size is None else size
        return EMPTY_ROOT if size == 0 else self.get_root(size)

    def inclusion_proof(self, index: int, size: int) -> dict[str, Any]:
        """pymerkle's serialised inclusion proof of leaf `index` (from 0) in the tree of `size` leaves."""
        return self.prove_inclusion(index + 1, size).serialize()

    def consistency_holds(self, size1: int, size2: int) -> bool:
        """pymerkle's consistency proof between two of this tree's sizes, checked against their roots."""
        if size1 == 0 or size1 == size2:
            return True
        proof = self.prove_consistency(size1, size2)
        try:
            verify_consistency(
                self.root(size1), self.root(size2), proof, prior_size=size1, later_size=size2, algorithm="sha256"
            )
        except InvalidProof:
            return False
        return True


# Signing --------------------------------------------------------------------------------------


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError("not base64") from error


def private_key_from(text: str) -> Ed25519PrivateKey:
    """AUDIT_SIGNING_KEY: the 32 bytes of an Ed25519 private key, base64."""
    raw = _b64decode(text)
    if len(raw) != 32:
        raise ValueError("an Ed25519 private key is 32 bytes (base64 of them)")
    return Ed25519PrivateKey.from_private_bytes(raw)


def public_key_text(private_key: Ed25519PrivateKey) -> str:
    """The public half, base64 of its 32 raw bytes: what a shop is given to check receipts."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return base64.b64encode(private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def public_key_from(text: str) -> Ed25519PublicKey:
    """A public key given as base64 of its 32 raw bytes, or the path of a file holding that text."""
    candidate = text.strip()
    try:
        is_file = Path(candidate).is_file()
    except OSError:
        is_file = False
    if is_file:
        candidate = Path(candidate).read_text().strip()
    raw = _b64decode(candidate)
    if len(raw) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes (base64 of them)")
    return Ed25519PublicKey.from_public_bytes(raw)


def tree_head_message(*, size: int, root_hash: str, timestamp: int) -> bytes:
    """The bytes a tree head's signature covers: the log, the size, the root and the time (ms)."""
    return canonical_bytes({"log": LOG_ID, "size": size, "root_hash": root_hash, "timestamp": timestamp})


def sign_tree_head(private_key: Ed25519PrivateKey, *, size: int, root_hash: str, timestamp: int) -> str:
    message = tree_head_message(size=size, root_hash=root_hash, timestamp=timestamp)
    return base64.b64encode(private_key.sign(message)).decode()


def tree_head_signature_valid(public_key: Ed25519PublicKey, head: dict[str, Any]) -> bool:
    """A tree head as published (size, root_hash, timestamp, signature) is signed by this key."""
    try:
        message = tree_head_message(
            size=int(head["size"]), root_hash=str(head["root_hash"]), timestamp=int(head["timestamp"])
        )
        public_key.verify(_b64decode(str(head["signature"])), message)
    except (InvalidSignature, KeyError, TypeError, ValueError):
        return False
    return True


def now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


# Receipts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceiptCheck:
    valid: bool
    problems: tuple[str, ...]
    records: int


def receipt_check(receipt: Any, public_key: Ed25519PublicKey) -> ReceiptCheck:
    """Check a receipt (the JSON that GET /api/agent/previews/<id>/receipt gives): the tree head is
    signed by `public_key`, the receipt names its preview and every record is about it, and every
    record, hashed as it is given, is a leaf of that tree. A v2 receipt's records are checked by their
    c2sp.org/tlog-proof@v1 (against the checkpoint note, signed by the same key); a v1 receipt's by
    pymerkle's inclusion proofs."""
    problems: list[str] = []
    try:
        head, records = receipt["tree_head"], receipt["records"]
        receipt_format = receipt.get("format")
        if receipt_format not in (RECEIPT_FORMAT, RECEIPT_FORMAT_V1):
            problems.append(f"unknown receipt format {receipt_format!r}")
        if not tree_head_signature_valid(public_key, head):
            problems.append("the tree head is not signed by this key")
        root, size = bytes.fromhex(head["root_hash"]), int(head["size"])
        preview = receipt.get("preview")
        if not isinstance(preview, str) or not preview:
            # Without it, a receipt could hold the records of any previews and still "check".
            problems.append("the receipt names no preview")
            preview = None
        if not records:
            problems.append("the receipt holds no sealed record")
        for entry in records:
            index, content = int(entry["leaf_index"]), entry["record"]
            where = f"record {content.get('id')} (leaf {index})"
            if preview is not None and content.get("preview") != preview:
                problems.append(f"{where} is about another preview")
            if not 0 <= index < size:
                problems.append(f"{where} lies outside the tree of {size} leaves")
                continue
            if receipt_format == RECEIPT_FORMAT_V1:
                problems += _v1_inclusion_problems(where, entry, content, root, index, size)
            else:
                problems += _tlog_proof_problems(where, entry, content, public_key, root, index, size)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, AuditEncodingError) as error:
        problems.append(f"malformed receipt: {error!r}")
        return ReceiptCheck(False, tuple(problems), 0)
    return ReceiptCheck(not problems, tuple(problems), len(records))


def _v1_inclusion_problems(
    where: str, entry: dict[str, Any], content: dict[str, Any], root: bytes, index: int, size: int
) -> list[str]:
    try:
        # The proof must be for this leaf index in this tree size (pymerkle checks its layout too).
        proof = InclusionProof.deserialize(entry["inclusion_proof"])
        verify_inclusion(leaf_hash(content), root, proof, index=index + 1, size=size, algorithm="sha256")
    except InvalidProof as error:
        return [f"{where} is not in the signed tree ({error})"]
    return []


def _tlog_proof_problems(
    where: str,
    entry: dict[str, Any],
    content: dict[str, Any],
    public_key: Ed25519PublicKey,
    root: bytes,
    index: int,
    size: int,
) -> list[str]:
    try:
        proof = tlog.tlog_proof_parse(entry["tlog_proof"])
        origin = tlog.checkpoint_parse(tlog.note_parse(proof.checkpoint_note).text).origin
        entry_bytes = canonical_bytes(content)
        _proof, verified = tlog.tlog_proof_verify(
            entry["tlog_proof"], entry_bytes, [tlog.verifier_key(origin, public_key)]
        )
    except tlog.FormatError as error:
        return [f"{where}: its tlog proof does not hold ({error})"]
    problems = []
    listed = entry.get("inclusion_proof")
    if not isinstance(listed, list) or [_b64decode(str(node)) for node in listed] != list(proof.hashes):
        problems.append(f"{where}: its inclusion proof is not its tlog proof's")
    if proof.index != index:
        problems.append(f"{where}: its tlog proof is for leaf {proof.index}")
    if proof.extra is not None and proof.extra != entry_bytes:
        problems.append(f"{where}: its tlog proof carries another record")
    if (verified.checkpoint.size, verified.checkpoint.root) != (size, root):
        problems.append(f"{where}: its tlog proof's checkpoint is not the receipt's tree head")
    return problems


def main(argv: list[str] | None = None) -> int:
    """`python -m approvals.audit.log RECEIPT --public-key KEY`: the same check as `manage.py verify_receipt`
    without Django or its settings, for a shop that has only this file's dependencies."""
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(description="Check an audit receipt with the audit public key alone.")
    parser.add_argument("file", metavar="FILE")
    parser.add_argument(
        "--public-key", metavar="KEY", required=True, help="base64 of the key's 32 bytes, or a file holding it"
    )
    args = parser.parse_args(argv)
    try:
        key = public_key_from(args.public_key)
        with open(args.file, encoding="utf-8") as opened:
            receipt = json.load(opened)
    except (OSError, ValueError) as error:
        print(f"Can't check the receipt: {error}.", file=sys.stderr)
        return 1
    check = receipt_check(receipt, key)
    for problem in check.problems:
        print(f"INVALID: {problem}.", file=sys.stderr)
    if check.valid:
        print(f"Receipt valid: {check.records} audit records of preview {receipt.get('preview')}.")
    return 0 if check.valid else 1


if __name__ == "__main__":
    raise SystemExit(main())
