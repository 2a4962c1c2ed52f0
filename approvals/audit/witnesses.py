"""Witnesses: the c2sp.org/tlog-witness protocol, from the log's side.

AUDIT_WITNESSES lists each witness as `<vkey>=<add-checkpoint URL>`, the vkey a c2sp.org/tlog-cosignature
key (signature type 0x04, `<name>+<key ID>+<base64>`). Each seal writes an outbox message in its
transaction (approvals.core.outbox); a worker on the `deliveries` queue (approvals.audit.cosigning) sends
the latest tree head to every witness that has not cosigned it, keeps the cosignatures and publishes the
head once AUDIT_WITNESS_QUORUM of them cosigned it; the beat's `approvals.cosign_audit_checkpoint` asks
again every minute.

This module is the protocol without the database: the settings' parsing, the request body, the
exchange with every witness at once within one deadline, the answer's meaning (`checkpoint_submit`).
The sealer imports it, so it imports nothing of the sealer's.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

import httpx
from django.conf import settings

from approvals.audit import tlog

logger = logging.getLogger(__name__)

MAX_PROOF_LINES = 63  # c2sp.org/tlog-witness: a client sends no more
ANSWER_BYTES_MAX = 64 * 1024  # cosignature lines are a few hundred bytes; a size line a few
SIZE_CONTENT_TYPE = "text/x.tlog.size"
USER_AGENT = "approval-gateway-audit/1"
# A second request (after a 409) is not started with less time than this left: it would only time out.
RETRY_TIME_MIN_SECONDS = 0.2

WITNESS_ENTRY = re.compile(r"(?P<vkey>\S+?)=(?P<url>https?://\S+)")


# Configuration ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Witness:
    key: tlog.VerifierKey  # the cosignature key, type 0x04
    url: str  # its add-checkpoint URL

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def vkey(self) -> str:
        """The vkey text, as AuditCosignature.witness keeps it."""
        return self.key.text()


def witness_entry_parse(entry: str) -> Witness:
    """One AUDIT_WITNESSES entry; tlog.FormatError saying what is wrong with it."""
    match = WITNESS_ENTRY.fullmatch(entry.strip())
    if not match:
        raise tlog.FormatError("an entry is <witness vkey>=<add-checkpoint URL>, the URL http:// or https://")
    key = tlog.verifier_key_parse(match["vkey"])
    if key.signature_type != tlog.SIGNATURE_COSIGNATURE_V1:
        raise tlog.FormatError("a witness's vkey is a cosignature/v1 key (type 0x04), not a note signing key")
    return Witness(key, match["url"])


@cache
def _parsed(entries: tuple[str, ...]) -> tuple[tuple[Witness, ...], tuple[str, ...]]:
    witnesses: list[Witness] = []
    problems: list[str] = []
    for number, entry in enumerate(entries, 1):
        try:
            witness = witness_entry_parse(entry)
        except tlog.FormatError as error:
            problems.append(f"AUDIT_WITNESSES entry {number} ({entry.strip()[:60]!r}): {error}")
            continue
        if any(known.name == witness.name for known in witnesses):
            # Its name labels its metrics and its /readyz entry; a witness's cosignatures have one key.
            problems.append(f"AUDIT_WITNESSES entry {number}: the witness {witness.name} is listed twice")
            continue
        witnesses.append(witness)
    return tuple(witnesses), tuple(problems)


def _entries() -> tuple[str, ...]:
    return tuple(entry for entry in settings.AUDIT_WITNESSES if entry.strip())


def witnesses_configured() -> list[Witness]:
    """The witnesses of AUDIT_WITNESSES. A malformed entry is left out (and is a system check error,
    `witness_settings_problems`): such a witness never counts towards the quorum."""
    return list(_parsed(_entries())[0])


def witness_quorum() -> int:
    return int(settings.AUDIT_WITNESS_QUORUM)


def witness_settings_problems() -> list[str]:
    """What is wrong with AUDIT_WITNESSES and AUDIT_WITNESS_QUORUM (approvals.audit.checks)."""
    witnesses, problems = _parsed(_entries())
    listed = len(_entries())
    quorum = witness_quorum()
    if listed and not 1 <= quorum <= listed:
        problems += (f"AUDIT_WITNESS_QUORUM is {quorum}: with {listed} witnesses it is 1 to {listed}",)
    if not listed and quorum:
        problems += (f"AUDIT_WITNESS_QUORUM is {quorum} but AUDIT_WITNESSES lists no witness",)
    return list(problems)


# The exchange -------------------------------------------------------------------------------------


def add_checkpoint_body(old_size: int, proof: Sequence[bytes], note: str) -> bytes:
    """`old <size>`, the consistency proof's hashes (base64, one a line), an empty line, the checkpoint."""
    if len(proof) > MAX_PROOF_LINES:
        raise ValueError(f"a consistency proof of {len(proof)} hashes is longer than the protocol allows")
    lines = [f"old {old_size}"] + [base64.b64encode(node).decode("ascii") for node in proof]
    return ("\n".join(lines) + "\n\n" + note).encode("utf-8")


@dataclass(frozen=True)
class HttpAnswer:
    status: int | None  # None: no whole answer in time (failure `timeout`), or no connection (`connection`)
    content_type: str = ""
    body: bytes = b""
    error: str = ""
    failure: str = ""


def post_all(requests: Sequence[tuple[str, bytes]], deadline_seconds: float) -> list[HttpAnswer]:
    """POST each (url, body), all at once; each exchange (connecting, sending, the whole answer) ends
    within `deadline_seconds`, however slowly a witness answers, so the whole call does too."""
    if not requests:
        return []
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_post_all(requests, deadline_seconds))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _post_all(requests: Sequence[tuple[str, bytes]], deadline_seconds: float) -> list[HttpAnswer]:
    async with httpx.AsyncClient(timeout=deadline_seconds, follow_redirects=False) as client:
        return list(await asyncio.gather(*(_post(client, url, body, deadline_seconds) for url, body in requests)))


async def _post(client: httpx.AsyncClient, url: str, body: bytes, deadline_seconds: float) -> HttpAnswer:
    try:
        return await asyncio.wait_for(_exchange(client, url, body), deadline_seconds)
    except (TimeoutError, httpx.TimeoutException):
        return HttpAnswer(None, error=f"no whole answer within {round(deadline_seconds, 1):g} s", failure="timeout")
    except (httpx.HTTPError, OSError) as error:
        return HttpAnswer(None, error=f"{type(error).__name__}: {error}"[:300], failure="connection")


async def _exchange(client: httpx.AsyncClient, url: str, body: bytes) -> HttpAnswer:
    headers = {"content-type": "text/plain; charset=utf-8", "user-agent": USER_AGENT}
    async with client.stream("POST", url, content=body, headers=headers) as response:
        received = bytearray()
        async for chunk in response.aiter_raw():
            received += chunk
            if len(received) >= ANSWER_BYTES_MAX:
                break
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        return HttpAnswer(response.status_code, content_type, bytes(received[:ANSWER_BYTES_MAX]))


# What a witness answered --------------------------------------------------------------------------


class Outcome(StrEnum):
    COSIGNED = "cosigned"  # a cosignature that verifies with the witness's key
    SUPERSEDED = "superseded"  # it already cosigned a later head of this log: nothing to do
    REFUSED = "refused"  # 400, 403, 404, 422 (or another 4xx): this request is not sent again
    CONFLICT = "conflict"  # 409 naming a size the log has no checkpoint of, or smaller than it cosigned
    AHEAD = "ahead"  # 409 naming a size larger than any checkpoint of the log
    BAD_ANSWER = "bad_answer"  # 200 without a valid cosignature of its key, a 409 without a size
    UNREACHABLE = "unreachable"  # no answer in time, no connection, 429 or 5xx: asked again later


# The outcomes /readyz reports as a witness refusing (UNREACHABLE is reported apart; it is retried).
REFUSALS = frozenset({Outcome.REFUSED, Outcome.CONFLICT, Outcome.AHEAD, Outcome.BAD_ANSWER})


@dataclass(frozen=True)
class Submission:
    """What one witness made of one checkpoint."""

    witness: Witness
    outcome: Outcome
    size: int  # the checkpoint's
    old_size: int  # the old size the last request carried
    http_status: int | None = None
    witness_size: int | None = None  # the size a 409 named
    line: str = ""  # the cosignature line (COSIGNED), without its newline
    timestamp: int = 0  # its time, seconds since 1970
    detail: str = ""
    failure: str = ""  # no answer: `timeout`, `connection`, or `deadline` (no time left for a retry)

    @property
    def status(self) -> str:
        """The HTTP status, or why there was none: a metrics label."""
        return str(self.http_status) if self.http_status is not None else self.failure


def _size_named(answer: HttpAnswer) -> int | None:
    """The witness's size in a 409 (`text/x.tlog.size`: a decimal and a newline), else None."""
    if answer.content_type != SIZE_CONTENT_TYPE:
        return None
    match = re.fullmatch(rb"(0|[1-9][0-9]{0,18})\n", answer.body)
    return int(match[1]) if match else None


def _cosignature(
    witness: Witness, note: str, answer: HttpAnswer, log_keys: Sequence[tlog.VerifierKey]
) -> tuple[str, int]:
    """The witness's cosignature line in a 200 answer and its timestamp, verified against its key
    (lines of other keys are ignored, as the protocol says); tlog.FormatError otherwise."""
    try:
        body = answer.body.decode("utf-8")
    except UnicodeDecodeError:
        raise tlog.FormatError("the answer is not UTF-8") from None
    lines = tlog.cosignature_lines_parse(body)
    verified = tlog.checkpoint_verify(note + body, log_keys, [witness.key])
    for key, timestamp in verified.cosigners:
        if key == witness.key:
            line = next(line for line in lines if line.name == key.name and line.key_id == key.key_id)
            return line.text().rstrip("\n"), timestamp
    raise tlog.FormatError(f"no cosignature of {witness.name} ({witness.key.key_id.hex()}) in the answer")


def _unreachable(answer: HttpAnswer) -> bool:
    return answer.status is None or answer.status == 429 or answer.status >= 500


def _answer_detail(answer: HttpAnswer) -> str:
    if answer.status is None:
        return answer.error
    text = answer.body[:200].decode("utf-8", "replace").strip()
    return f"HTTP {answer.status}" + (f": {text}" if text else "")


def checkpoint_submit(
    note: str,
    witnesses: Sequence[tuple[Witness, int]],
    *,
    log_keys: Sequence[tlog.VerifierKey],
    consistency_proof: Callable[[int], list[bytes]],
    known_size: Callable[[int], bool],
    deadline_seconds: float,
) -> list[Submission]:
    """Send the checkpoint `note` (the log's signatures only) to each witness, with the size it last
    cosigned (0 if none) as `old` and the consistency proof from there (`consistency_proof(old)`), all
    at once, everything within `deadline_seconds`. A 409 naming a size the log has a checkpoint of
    (`known_size`) and not past this one is sent once more from that size; any other 409 is a
    conflict with this log's history, or a witness ahead of it. One Submission per witness, in order."""
    checkpoint = tlog.checkpoint_parse(tlog.note_parse(note).text)
    size = checkpoint.size
    started = time.monotonic()
    results: dict[int, Submission] = {}
    pending: list[tuple[int, int]] = []  # (witness position, old size) to send now
    cosigned_before: dict[int, int] = {}
    for position, (witness, old) in enumerate(witnesses):
        cosigned_before[position] = old
        if old > size:
            results[position] = Submission(witness, Outcome.SUPERSEDED, size, old, detail=f"it cosigned {old}")
        else:
            pending.append((position, old))
    for attempt in (1, 2):
        if not pending:
            break
        remaining = deadline_seconds - (time.monotonic() - started)
        if remaining < RETRY_TIME_MIN_SECONDS:
            for position, old in pending:
                results[position] = Submission(
                    witnesses[position][0],
                    Outcome.UNREACHABLE,
                    size,
                    old,
                    detail="the deadline passed before the retry",
                    failure="deadline",
                )
            break
        bodies = [
            (witnesses[position][0].url, add_checkpoint_body(old, consistency_proof(old), note))
            for position, old in pending
        ]
        answers = post_all(bodies, remaining)
        again: list[tuple[int, int]] = []
        for (position, old), answer in zip(pending, answers, strict=True):
            witness = witnesses[position][0]
            result, retry_from = _understand(
                witness, note, size, old, answer, attempt, cosigned_before[position], log_keys, known_size
            )
            if retry_from is not None:
                again.append((position, retry_from))
            else:
                assert result is not None
                results[position] = result
        pending = again
    return [results[position] for position in range(len(witnesses))]


def _understand(
    witness: Witness,
    note: str,
    size: int,
    old: int,
    answer: HttpAnswer,
    attempt: int,
    cosigned_before: int,
    log_keys: Sequence[tlog.VerifierKey],
    known_size: Callable[[int], bool],
) -> tuple[Submission | None, int | None]:
    """The Submission an answer makes, or (None, the old size to send again from)."""

    def outcome(
        kind: Outcome, detail: str | None = None, *, witness_size: int | None = None, line: str = "", timestamp: int = 0
    ) -> tuple[Submission, None]:
        text = _answer_detail(answer) if detail is None else detail
        submission = Submission(
            witness, kind, size, old, answer.status, witness_size, line, timestamp, text, answer.failure
        )
        return submission, None

    if _unreachable(answer):
        return outcome(Outcome.UNREACHABLE)
    if answer.status == 200:
        try:
            line, timestamp = _cosignature(witness, note, answer, log_keys)
        except tlog.FormatError as error:
            return outcome(Outcome.BAD_ANSWER, f"HTTP 200 without a valid cosignature: {error}")
        return outcome(Outcome.COSIGNED, "", line=line, timestamp=timestamp)
    if answer.status != 409:
        return outcome(Outcome.REFUSED)
    named = _size_named(answer)
    if named is None:
        return outcome(Outcome.BAD_ANSWER, f"HTTP 409 without a {SIZE_CONTENT_TYPE} size")
    if named > size:
        if known_size(named):
            return outcome(Outcome.SUPERSEDED, f"it cosigned {named} already", witness_size=named)
        return outcome(
            Outcome.AHEAD,
            f"it holds a checkpoint of size {named}, larger than any this log signed (the log has {size})",
            witness_size=named,
        )
    if named < cosigned_before:
        return outcome(
            Outcome.CONFLICT,
            f"it names size {named}, smaller than the {cosigned_before} it cosigned: it lost or rolled back its state",
            witness_size=named,
        )
    if named == old or attempt > 1:
        return outcome(Outcome.CONFLICT, f"it names size {named} again after a request from {old}", witness_size=named)
    if not known_size(named):
        return outcome(
            Outcome.CONFLICT,
            f"it holds a checkpoint of size {named}, a size this log has no checkpoint of: another history",
            witness_size=named,
        )
    return None, named
