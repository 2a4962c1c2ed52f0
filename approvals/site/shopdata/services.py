"""One record of the shop data API: read it, or write it in the import's item format with the import's
validation and rules, under its row lock, with optimistic concurrency (`If-Match`) and safe retries
(`Idempotency-Key`). Every call is audited with the token's label as the operator (docs/shop-data.md).

The answers are plain data (`ShopAnswer`); the view only turns them into responses."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.core.digests import canonical_json, sha256_hex
from approvals.core.errors import ErrorCode
from approvals.core.registry import ImportSection, registry
from approvals.core.services import audit_record
from approvals.models import AuditEvent, ShopIdempotencyKey, ShopToken
from approvals.site.shop_import import ShopDataInvalid, ShopRecordRefused, shop_data_validate, shop_item_write
from approvals.site.shopdata.tokens import scope_allows

SOURCE = "shop_api"
IDEMPOTENCY_KEY_PATTERN = re.compile(r"^[!-~]{1,255}$")
VERSION_PATTERN = re.compile(r'^(?:W/)?"?([^"]*)"?$')


@dataclass
class ShopAnswer:
    """What the API answers: the HTTP status and the JSON body; `replayed` for an answer stored under the
    request's Idempotency-Key."""

    status: int
    body: dict[str, Any]
    replayed: bool = False


class ShopCallRefused(Exception):
    """The call is refused with this status, code, message and facts; nothing was written."""

    def __init__(self, status: int, code: str, message: str, **facts: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.facts = status, code, message, facts

    def answer(self) -> ShopAnswer:
        error = {"code": self.code, "message": self.message, **self.facts}
        return ShopAnswer(self.status, {"ok": False, "executed": False, "error": error})


@dataclass
class ShopCall:
    """One call: the token, the section (`orders`), the record's identity in the path, and for a PUT
    the body as parsed (strict JSON) and the two headers."""

    token: ShopToken
    section_key: str
    identity: str
    write: bool = False
    body: Any = None
    if_match: str | None = None
    idempotency_key: str | None = None
    audited_change: bool = field(default=False, init=False)

    @property
    def section(self) -> ImportSection:
        return registry.import_sections[self.section_key]


def _answer(record: dict[str, Any], *, status: int, outcome: str | None = None) -> ShopAnswer:
    stored = dict(record)
    version = stored.pop("version")
    body: dict[str, Any] = {"ok": True}
    if outcome is not None:
        body["outcome"] = outcome
    body.update({"record": stored, "version": version})
    return ShopAnswer(status, body)


def _record(call: ShopCall, *, lock: bool) -> dict[str, Any] | None:
    assert call.section.record is not None  # only sections with a record hook are routed here
    try:
        return call.section.record(call.identity, lock)
    except ShopRecordRefused as refused:
        raise ShopCallRefused(409, refused.code, refused.message) from refused


def _scope_check(call: ShopCall) -> None:
    if not scope_allows(call.token.scopes, section=call.section_key, write=call.write):
        needed = f"{call.section_key}:write" if call.write else f"{call.section_key}:read or {call.section_key}:write"
        raise ShopCallRefused(
            403,
            ErrorCode.PERMISSION_DENIED,
            f"This token may not {'write' if call.write else 'read'} {call.section_key}: it needs {needed}.",
            needed_scope=f"{call.section_key}:write" if call.write else f"{call.section_key}:read",
            token_scopes=call.token.scopes,
        )


# Validation: exactly the import's, on a one-item file ------------------------------------------------


def _relative(problem: str, call: ShopCall) -> str:
    """`$.orders[0].currency: …` (the import's path in a one-item file) as `$.currency: …`, a path in
    the request's body; the order's own check under its lock names the item by its id instead."""
    for prefix in (f"$.{call.section_key}[0]", f"$.{call.section_key}[{call.identity!r}]"):
        if problem.startswith(prefix):
            return "$" + problem[len(prefix) :]
    return problem


def _invalid(call: ShopCall, problems: list[str]) -> ShopCallRefused:
    relative = [_relative(problem, call) for problem in problems]
    return ShopCallRefused(400, "invalid_record", "; ".join(relative), problems=relative)


def record_validate(call: ShopCall) -> dict[str, Any]:
    """The body as one item of the import's section, validated by the import itself (the same
    serializer, context and messages); the identity in the path fills in an item that omits it."""
    item = call.body
    key_field = call.section.key_field
    if not isinstance(item, dict):
        raise _invalid(call, ["$: the record must be a JSON object"])
    if key_field not in item:
        item = {key_field: call.identity, **item}
    elif item[key_field] != call.identity:
        raise _invalid(call, [f"$.{key_field}: must be {call.identity!r}, the {key_field} in the path, or be left out"])
    try:
        sections = shop_data_validate(json.dumps({call.section_key: [item]}))
    except ShopDataInvalid as invalid:
        raise _invalid(call, invalid.problems) from invalid
    [validated] = next(items for section, items in sections if section.key == call.section_key)
    return dict(validated)


# Idempotency-Key ------------------------------------------------------------------------------------


def _fingerprint(call: ShopCall) -> str:
    return sha256_hex(
        canonical_json(
            {"section": call.section_key, "identity": call.identity, "if_match": call.if_match, "body": call.body}
        )
    )


def _stored_answer(stored: ShopIdempotencyKey, fingerprint: str) -> ShopAnswer:
    if stored.fingerprint != fingerprint:
        raise ShopCallRefused(
            409,
            ErrorCode.IDEMPOTENCY_KEY_REUSED,
            f"The Idempotency-Key {stored.key!r} was used for another request (another record, body or "
            "If-Match); use a new key for a new request.",
        )
    return ShopAnswer(stored.status_code, stored.response, replayed=True)


def _key_claim(call: ShopCall, fingerprint: str) -> ShopAnswer | None:
    """The answer stored under the call's key, or None once this call holds the key. The key's row is
    inserted first: a concurrent call with the same key waits on it until this one commits (then it
    gets this answer) or rolls back (then it runs itself)."""
    assert call.idempotency_key is not None
    stored = ShopIdempotencyKey.objects.filter(token=call.token, key=call.idempotency_key).first()
    if stored is None:
        try:
            with transaction.atomic():
                ShopIdempotencyKey.objects.create(
                    token=call.token, key=call.idempotency_key, fingerprint=fingerprint, status_code=0, response={}
                )
            return None
        except IntegrityError:
            stored = ShopIdempotencyKey.objects.get(token=call.token, key=call.idempotency_key)
    return _stored_answer(stored, fingerprint)


# The calls ------------------------------------------------------------------------------------------


def _version_check(call: ShopCall, current: dict[str, Any] | None) -> None:
    if call.if_match is None:
        return
    match = VERSION_PATTERN.match(call.if_match.strip())
    wanted = match.group(1) if match else call.if_match
    current_version = None if current is None else current["version"]
    if current_version is None or str(current_version) != wanted:
        raise ShopCallRefused(
            409,
            ErrorCode.VERSION_MISMATCH,
            f"If-Match names version {wanted!r}, but the {call.section_key} record {call.identity!r} is "
            + ("not stored yet." if current is None else f"at version {current_version!r} now.")
            + " Read it again (GET), then send your change with its current version.",
            current_version=current_version,
        )


def _put(call: ShopCall) -> ShopAnswer:
    with transaction.atomic():
        if call.idempotency_key is not None:
            stored = _key_claim(call, _fingerprint(call))
            if stored is not None:
                return stored
        # The row lock the write takes, taken first: the version and the import's rules are checked
        # against the record as it stays until this commits (a refund recorded meanwhile waits for it).
        current = _record(call, lock=True)
        _version_check(call, current)
        item = record_validate(call)
        try:
            outcome = shop_item_write(
                call.section,
                item,
                operator=call.token.label,
                source=SOURCE,
                facts={"token_prefix": call.token.token_prefix, "token_id": call.token.pk},
            )
        except ShopDataInvalid as invalid:  # a rule checked again under the lock (a refund in flight)
            raise _invalid(call, invalid.problems) from invalid
        call.audited_change = outcome != "unchanged"
        after = _record(call, lock=False)
        assert after is not None
        answer = _answer(after, status=201 if outcome == "created" else 200, outcome=outcome)
        if call.idempotency_key is not None:
            ShopIdempotencyKey.objects.filter(token=call.token, key=call.idempotency_key).update(
                status_code=answer.status, response=answer.body
            )
        _audit(call, answer)
        return answer


def _get(call: ShopCall) -> ShopAnswer:
    record = _record(call, lock=False)
    if record is None:
        raise ShopCallRefused(
            404, ErrorCode.NOT_FOUND, f"There is no {call.section_key} record {call.identity!r}.", record=None
        )
    return _answer(record, status=200)


def _audit(call: ShopCall, answer: ShopAnswer) -> None:
    """One record per call: a change is the import's `shop_data_changed` (with before and after); every
    other call, a read, an unchanged write, a replay or a refusal, is `shop_api_call`."""
    ShopToken.objects.filter(pk=call.token.pk).update(last_used_at=timezone.now())
    if call.audited_change:
        return
    error = answer.body.get("error") or {}
    audit_record(
        event=AuditEvent.SHOP_API_CALL,
        subject_type=call.section.subject_type,
        subject_id=call.identity[:64],
        result={
            "source": SOURCE,
            "operator": call.token.label,
            "token_prefix": call.token.token_prefix,
            "token_id": call.token.pk,
            "section": call.section_key,
            "method": "PUT" if call.write else "GET",
            "status": answer.status,
            **({"outcome": answer.body["outcome"]} if "outcome" in answer.body else {}),
            **({"replayed": True} if answer.replayed else {}),
            **({"code": error.get("code")} if error else {}),
        },
    )


def shop_call(call: ShopCall) -> ShopAnswer:
    """Answer one call of the shop data API (GET when `call.write` is false, else PUT); always audited."""
    try:
        if call.idempotency_key is not None and not IDEMPOTENCY_KEY_PATTERN.match(call.idempotency_key):
            raise ShopCallRefused(
                400,
                ErrorCode.INVALID_IDEMPOTENCY_KEY,
                "An Idempotency-Key is 1 to 255 printable ASCII characters without spaces.",
            )
        _scope_check(call)
        answer = _put(call) if call.write else _get(call)
    except ShopCallRefused as refused:
        answer = refused.answer()
    if not (call.write and answer.status < 300 and not answer.replayed):  # a write audits itself as it commits
        with transaction.atomic():
            _audit(call, answer)
    return answer
