"""The audit log's hash chain: each record's hash covers its content and the previous record's hash."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .digests import canonical_json, digest_of

GENESIS = "0" * 64


def audit_record_hash(*, sequence: int, previous_hash: str, fields: dict[str, Any]) -> str:
    return digest_of({"sequence": sequence, "previous_hash": previous_hash, **fields})


def audit_record_fields(record: Any) -> dict[str, Any]:
    """The hashed content of a record (as stored, so a verifier recomputes the same value)."""
    return {"created_at": record.created_at.isoformat(), **audit_record_content(record)}


def audit_record_content(record: Any) -> dict[str, Any]:
    """What a record says, without the values it only gets under the chain head's lock."""
    return {
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


_STAMPED_UNDER_LOCK = ("created_at", "previous_hash", "sequence")


def audit_record_text_parts(content: dict[str, Any]) -> tuple[str, str, str, str]:
    """The text audit_record_hash hashes, cut where the values stamped under the chain head's lock go:
    `part0 + created_at.isoformat() + part1 + previous_hash + part2 + str(sequence) + part3`.

    PostgreSQL completes and hashes it inside the append itself (approvals_audit_append, migration
    0008), so that the head is locked, the records linked and the COMMIT sent in one round trip. The
    text, and so every hash, is the same as audit_record_hash's: verify_audit does not know which wrote it.
    """
    parts = [""]
    for index, key in enumerate(sorted([*content, *_STAMPED_UNDER_LOCK])):
        item = ("," if index else "{") + json.dumps(key, ensure_ascii=False) + ":"
        if key == "sequence":  # an integer
            parts[-1] += item
            parts.append("")
        elif key in _STAMPED_UNDER_LOCK:  # strings whose characters JSON never escapes
            parts[-1] += item + '"'
            parts.append('"')
        else:
            parts[-1] += item + canonical_json(content[key])
    parts[-1] += "}"
    first, second, third, fourth = parts
    return first, second, third, fourth


@dataclass(frozen=True)
class ChainProblem:
    sequence: int
    record_id: int | None
    problem: str


def audit_chain_verify(records: Any, *, head_sequence: int | None = None) -> ChainProblem | None:
    """Walk the records in sequence order; return the first broken link, or None."""
    expected_sequence, previous_hash = 1, GENESIS
    for record in records:
        if record.sequence != expected_sequence:
            return ChainProblem(expected_sequence, None, f"record {expected_sequence} is missing")
        if record.previous_hash != previous_hash:
            return ChainProblem(record.sequence, record.pk, "does not link to the record before it")
        recomputed = audit_record_hash(
            sequence=record.sequence, previous_hash=record.previous_hash, fields=audit_record_fields(record)
        )
        if recomputed != record.record_hash:
            return ChainProblem(record.sequence, record.pk, "was changed after it was written")
        expected_sequence, previous_hash = expected_sequence + 1, record.record_hash
    if head_sequence is not None and head_sequence >= expected_sequence:
        return ChainProblem(expected_sequence, None, f"records {expected_sequence} to {head_sequence} are missing")
    return None
