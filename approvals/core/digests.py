"""Digests and canonical encodings: what a preview's digest and an audit record's leaf are made of."""

import hashlib
import json
from typing import Any

import rfc8785


class AuditEncodingError(ValueError):
    """A value the canonical encoding can't represent exactly (an integer beyond 2^53, a NaN, ...)."""


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 canonical JSON, as UTF-8 bytes (what an audit record is hashed as)."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as error:
        raise AuditEncodingError(str(error)) from error


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def digest_of(value: Any) -> str:
    return sha256_hex(canonical_json(value))
