"""The offline check of an evidence bundle: what `manage.py verify_evidence` and
`python -m approvals.audit.evidence_check` run. Pure: no Django, no database, no network, so that a card
network's reviewer checks a bundle years later with this file, approvals/audit/tlog.py,
approvals/core/digests.py and the log's verifier key, taken from somewhere other than the bundle.

A bundle (a zip, written by approvals.audit.evidence) holds, for one preview:

- `records/<id>.json`: each audit record of the preview in its canonical bytes (RFC 8785), and
  `records/<id>.tlog-proof`: its c2sp.org/tlog-proof@v1 (extra = those bytes) against `checkpoint.txt`,
  the log's signed checkpoint with the witnesses' cosignatures. These are *sealed*: the proof leads from
  SHA-256(0x00 || the file's bytes) to a root the log's key signed.
- `digest-input.json`: the exact bytes whose SHA-256 is the preview's digest, the digest the sealed
  records state (the proposal's, each approval's); `preview.json`'s fields the digest covers must agree.
- `consent.json`, `approvals.json`, `execution.json` and `provider.json`: each names the sealed record it
  rests on, and must agree with it. What no sealed record states (people's usernames, a refund's status
  now, the provider's own events) is *informational*, and the check says so.
- `manifest.json` lists every file with its SHA-256 (it catches a damaged or partial bundle; it is not
  signed: the log's signature is what proves the records), `README.txt` for the person who receives it,
  `log-keys.txt` and `witness-keys.txt` for information only.

A bundle proves that what it holds is in the log; it cannot prove that nothing was left out.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import re
import sys
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from approvals.audit import tlog
from approvals.core.digests import AuditEncodingError, canonical_bytes

EVIDENCE_FORMAT = "approval-gateway-evidence/v1"

MANIFEST = "manifest.json"
README = "README.txt"
PREVIEW = "preview.json"
DIGEST_INPUT = "digest-input.json"
CONSENT = "consent.json"
APPROVALS = "approvals.json"
EXECUTION = "execution.json"
PROVIDER = "provider.json"
CHECKPOINT = "checkpoint.txt"
LOG_KEYS = "log-keys.txt"
WITNESS_KEYS = "witness-keys.txt"
INFORMATIONAL_FILES = (README, LOG_KEYS, WITNESS_KEYS)

RECORD_FILE = re.compile(r"records/(0|[1-9][0-9]{0,18})\.(json|tlog-proof)")
# The audit event of an approval, by role; an execution's transitions carry `outcome_from`.
APPROVAL_EVENTS = {"customer": "confirmed", "staff": "approved"}
EXECUTED_EVENT = "executed"
PROPOSED_EVENT = "proposed"
MAX_FILE_BYTES = 64 << 20  # a bundle is small; a bigger member is refused before it is inflated
_MISSING = object()


def record_file(record_id: int) -> str:
    return f"records/{record_id}.json"


def proof_file(record_id: int) -> str:
    return f"records/{record_id}.tlog-proof"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class EvidenceUnreadable(ValueError):
    """Not a bundle that can be read at all (not a zip, a name twice, a member too big)."""


def bundle_read(source: str | Path | bytes) -> dict[str, bytes]:
    """The files of a bundle (a zip file's path, or its bytes), by name."""
    try:
        with zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source) as bundle:
            files: dict[str, bytes] = {}
            for info in bundle.infolist():
                if info.is_dir():
                    continue
                if info.filename in files:
                    raise EvidenceUnreadable(f"{info.filename} is in the zip twice")
                if info.file_size > MAX_FILE_BYTES:
                    raise EvidenceUnreadable(f"{info.filename} is larger than a bundle's files are")
                files[info.filename] = bundle.read(info)
            return files
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile) as error:
        raise EvidenceUnreadable(f"not a readable zip file: {error}") from error


@dataclass
class EvidenceCheck:
    preview: str | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what is informational, and why
    records: int = 0  # records proven to be in the log
    checkpoint: tlog.Checkpoint | None = None
    log_keys: tuple[str, ...] = ()  # the log keys that signed checkpoint.txt, `<name>+<key ID>`
    cosigners: tuple[str, ...] = ()  # the witnesses that cosigned it
    signed: list[str] = field(default_factory=list)  # approvals whose passkey signature verified
    unsigned: list[str] = field(default_factory=list)  # approvals given without a passkey

    @property
    def valid(self) -> bool:
        return not self.problems


def evidence_check(
    files: Mapping[str, bytes],
    log_keys: Sequence[tlog.VerifierKey],
    witness_keys: Sequence[tlog.VerifierKey] = (),
    *,
    quorum: int | None = None,
    rp_id: str | None = None,
    origins: Sequence[str] | None = None,
) -> EvidenceCheck:
    """Check a bundle's files against the log's verifier keys (and, with `witness_keys`, that `quorum`
    of them, all of them by default, cosigned its checkpoint). Every failure is one line of `problems`.
    An approval's passkey signature is checked against `rp_id` and `origins` when given (the shop's own
    relying party and site), else against the RP ID and origin it names."""
    checker = _Checker(files, log_keys, witness_keys, len(witness_keys) if quorum is None else quorum)
    checker.rp_id, checker.origins = rp_id, list(origins) if origins else None
    return checker.run()


def _describe(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


class _Checker:
    def __init__(
        self,
        files: Mapping[str, bytes],
        log_keys: Sequence[tlog.VerifierKey],
        witness_keys: Sequence[tlog.VerifierKey],
        quorum: int,
    ) -> None:
        self.files = files
        self.log_keys = list(log_keys)
        self.witness_keys = list(witness_keys)
        self.quorum = quorum
        self.result = EvidenceCheck()
        self.sealed: dict[int, dict[str, Any]] = {}  # record id -> the record, proven in the log
        self.digest: str | None = None  # the digest the sealed records and digest-input.json agree on
        self.facts: dict[str, Any] | None = None  # what the digest covers, once it is bound
        self.approvals_held: list[dict[str, Any]] = []  # consent.json's and approvals.json's entries
        self.execution_record: tuple[int, dict[str, Any]] | None = None
        self.rp_id: str | None = None
        self.origins: list[str] | None = None

    def problem(self, text: str) -> None:
        self.result.problems.append(text)

    def note(self, text: str) -> None:
        self.result.notes.append(text)

    def run(self) -> EvidenceCheck:
        self._manifest()
        self._checkpoint()
        self._records()
        self._digest()
        self._approvals()
        self._execution()
        self._provider()
        present = [name for name in INFORMATIONAL_FILES if name in self.files]
        if present:
            self.note(
                f"{', '.join(present)}: informational (a verifier takes the log's keys from elsewhere, never "
                "from the bundle)."
            )
        self.note(
            "manifest.json: its hashes catch a damaged or incomplete bundle; it is not signed (the log's "
            "signature over the records is the proof)."
        )
        return self.result

    # Reading -------------------------------------------------------------------------------------

    def _json(self, name: str, *, kind: type = dict) -> Any:
        """A JSON file of the bundle, or None (the problem said) when it is missing or malformed."""
        raw = self.files.get(name)
        if raw is None:
            self.problem(f"{name} is missing")
            return None
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            self.problem(f"{name} is not JSON: {error}")
            return None
        if not isinstance(value, kind):
            self.problem(f"{name} is not a JSON {'object' if kind is dict else 'array'}")
            return None
        return value

    def _text(self, name: str) -> str | None:
        raw = self.files.get(name)
        if raw is None:
            self.problem(f"{name} is missing")
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.problem(f"{name} is not UTF-8 text")
            return None

    # The manifest --------------------------------------------------------------------------------

    def _manifest(self) -> None:
        manifest = self._json(MANIFEST)
        if manifest is None:
            return
        if manifest.get("format") != EVIDENCE_FORMAT:
            self.problem(f"manifest.json: unknown format {manifest.get('format')!r}, expected {EVIDENCE_FORMAT}")
        preview = manifest.get("preview")
        if isinstance(preview, str) and preview:
            self.result.preview = preview
        else:
            self.problem("manifest.json names no preview")
        entries = manifest.get("files")
        if not isinstance(entries, list):
            self.problem("manifest.json lists no files")
            return
        listed: set[str] = set()
        for entry in entries:
            name = entry.get("name") if isinstance(entry, dict) else None
            expected = entry.get("sha256") if isinstance(entry, dict) else None
            if not isinstance(name, str) or not isinstance(expected, str):
                self.problem(f"manifest.json: malformed entry {_describe(entry)}")
                continue
            if name in listed:
                self.problem(f"manifest.json lists {name} twice")
            listed.add(name)
            if name not in self.files:
                self.problem(f"{name} is listed in the manifest but missing from the bundle")
            elif (actual := sha256_hex(self.files[name])) != expected:
                self.problem(f"{name}: its SHA-256 is {actual}, the manifest says {expected}")
        for name in sorted(self.files):
            if name != MANIFEST and name not in listed:
                self.problem(f"{name} is in the bundle but not in the manifest")

    # The checkpoint and the records --------------------------------------------------------------

    def _verify_checkpoint(self, where: str, note: str) -> tlog.VerifiedCheckpoint | None:
        """`note` signed by a log key (key name = its origin) and cosigned by enough witnesses."""
        try:
            origin = tlog.checkpoint_parse(tlog.note_parse(note).text).origin
            if not any(key.name == origin for key in self.log_keys):
                raise tlog.FormatError(f"the checkpoint's origin {origin!r} is the name of no log key given")
            verified = tlog.checkpoint_verify(note, self.log_keys, self.witness_keys)
        except tlog.FormatError as error:
            self.problem(f"{where}: {error}")
            return None
        if len(verified.cosigners) < self.quorum:
            self.problem(
                f"{where}: {len(verified.cosigners)} of the witnesses given cosigned its checkpoint, "
                f"{self.quorum} are required"
            )
            return None
        return verified

    def _checkpoint(self) -> None:
        note = self._text(CHECKPOINT)
        if note is None:
            return
        verified = self._verify_checkpoint(CHECKPOINT, note)
        if verified is not None:
            self.result.checkpoint = verified.checkpoint
            self.result.log_keys = tuple(f"{key.name}+{key.key_id.hex()}" for key in verified.log_keys)
            self.result.cosigners = tuple(f"{key.name}+{key.key_id.hex()}" for key, _time in verified.cosigners)

    def _records(self) -> None:
        ids: set[int] = set()
        for name in self.files:
            if name.startswith("records/"):
                match = RECORD_FILE.fullmatch(name)
                if match is None:
                    self.problem(f"{name}: records/ holds only <id>.json and <id>.tlog-proof files")
                else:
                    ids.add(int(match[1]))
        indexes: dict[int, int] = {}
        for record_id in sorted(ids):
            proven = self._record(record_id)
            if proven is None:
                continue
            index, content = proven
            if index in indexes:
                self.problem(f"records {indexes[index]} and {record_id} both claim leaf {index}")
                continue
            indexes[index] = record_id
            self.sealed[record_id] = content
        self.result.records = len(self.sealed)
        if not ids:
            self.problem("the bundle holds no audit record")

    def _record(self, record_id: int) -> tuple[int, dict[str, Any]] | None:
        """The record, once it is proven to be a leaf of the signed tree and about this preview."""
        name, proof_name = record_file(record_id), proof_file(record_id)
        entry, proof_text = self.files.get(name), self.files.get(proof_name)
        if entry is None:
            self.problem(f"{proof_name} has no {name}")
            return None
        if proof_text is None:
            self.problem(f"{name} has no {proof_name}: it is not proven to be in the log")
            return None
        ok = True
        try:
            content = json.loads(entry.decode("utf-8"))
            if not isinstance(content, dict):
                raise ValueError("not a JSON object")
            if canonical_bytes(content) != entry:
                self.problem(f"{name} is not in canonical form (RFC 8785): it is not the record as sealed")
                ok = False
        except (UnicodeDecodeError, ValueError, AuditEncodingError) as error:
            self.problem(f"{name} is not a JSON record: {error}")
            return None
        try:
            proof = tlog.tlog_proof_parse(proof_text.decode("utf-8"))
        except (UnicodeDecodeError, tlog.FormatError) as error:
            self.problem(f"{proof_name}: {error}")
            return None
        if proof.extra != entry:
            self.problem(f"{proof_name}: its extra data is not {name}")
            ok = False
        verified = self._verify_checkpoint(proof_name, proof.checkpoint_note)
        if verified is None:
            return None
        checkpoint = verified.checkpoint
        if not tlog.inclusion_valid(
            tlog.entry_leaf_hash(entry), proof.index, checkpoint.size, proof.hashes, checkpoint.root
        ):
            self.problem(
                f"{proof_name}: SHA-256(0x00 || {name}) is not leaf {proof.index} of the checkpointed tree of "
                f"{checkpoint.size}"
            )
            return None
        if self.result.checkpoint is not None and checkpoint != self.result.checkpoint:
            self.problem(
                f"{proof_name} proves the record against a tree of {checkpoint.size}, checkpoint.txt is of "
                f"{self.result.checkpoint.size}"
            )
            ok = False
        if content.get("id") != record_id:
            self.problem(f"{name} holds record {content.get('id')!r}")
            ok = False
        if self.result.preview is not None and content.get("preview") != self.result.preview:
            self.problem(f"{name} is about preview {content.get('preview')}, not {self.result.preview}")
            ok = False
        return (proof.index, content) if ok else None

    # The digest ----------------------------------------------------------------------------------

    def _digest(self) -> None:
        preview, raw = self._json(PREVIEW), self.files.get(DIGEST_INPUT)
        if raw is None:
            self.problem(f"{DIGEST_INPUT} is missing")
            return
        computed = sha256_hex(raw)
        try:
            facts = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            self.problem(f"{DIGEST_INPUT} is not JSON: {error}")
            return
        if not isinstance(facts, dict):
            self.problem(f"{DIGEST_INPUT} is not a JSON object")
            return
        stated = self._digests_sealed()
        for record_id, digest in stated:
            if digest != computed:
                self.problem(f"record {record_id} states the digest {digest}; {DIGEST_INPUT} hashes to {computed}")
        if not stated:
            self.problem(f"no sealed record states the preview's digest: {DIGEST_INPUT} is bound to nothing")
        if facts.get("id") != self.result.preview:
            self.problem(f"{DIGEST_INPUT} is about preview {facts.get('id')}, not {self.result.preview}")
        elif stated and all(digest == computed for _id, digest in stated):
            self.digest, self.facts = computed, facts
        if preview is None:
            return
        if preview.get("digest") != computed:
            self.problem(f"preview.json's digest is {preview.get('digest')}; {DIGEST_INPUT} hashes to {computed}")
        for key, value in facts.items():
            if key in preview and preview[key] != value:
                self.problem(f"preview.json's {key} is {_describe(preview[key])}, the digest covers {_describe(value)}")
        loose = sorted(key for key in preview if key not in facts and key != "digest")
        if loose:
            self.note(f"preview.json: {', '.join(loose)} are informational (the digest does not cover them).")

    def _digests_sealed(self) -> list[tuple[int, Any]]:
        """(record id, digest) for each sealed record stating the digest: the proposal, the approvals."""
        stated = []
        for record_id, record in sorted(self.sealed.items()):
            result = _object(record.get("result"))
            basis = _object(record.get("approval_basis"))
            if record.get("event") == PROPOSED_EVENT and "digest" in result:
                stated.append((record_id, result["digest"]))
            elif record.get("event") in APPROVAL_EVENTS.values() and "digest" in basis:
                stated.append((record_id, basis["digest"]))
        return stated

    # Consent and approvals -----------------------------------------------------------------------

    def _approvals(self) -> None:
        consent, approvals = self._json(CONSENT), self._json(APPROVALS)
        entries: list[tuple[str, dict[str, Any], str]] = []
        if consent is not None:
            required = consent.get("required")
            if self.facts is not None:
                needed = "customer" in (self.facts.get("required_approvals") or [])
                if required is not needed:
                    self.problem(
                        f"consent.json says the customer's confirmation is {'' if required else 'not '}required; "
                        f"the digest's required_approvals say {_describe(self.facts.get('required_approvals'))}"
                    )
            if consent.get("given"):
                entries.append(("consent.json", consent, "customer"))
            elif required:
                self.note("consent.json: the customer has not confirmed (yet).")
        if approvals is not None:
            listed = approvals.get("approvals")
            if not isinstance(listed, list) or not all(isinstance(entry, dict) for entry in listed):
                self.problem("approvals.json holds no list of approvals")
            else:
                for number, entry in enumerate(listed, 1):
                    if entry.get("role") in APPROVAL_EVENTS:
                        entries.append((f"approvals.json's approval {number}", entry, entry["role"]))
                    else:
                        self.problem(f"approvals.json's approval {number} has no role of {sorted(APPROVAL_EVENTS)}")
        bound: set[int] = set()
        for where, entry, role in entries:
            record_id = self._approval_bound(where, entry, role)
            if record_id is not None:
                bound.add(record_id)
                self.approvals_held.append(entry)
                self._passkey(where, entry, record_id)
        for record_id, record in sorted(self.sealed.items()):
            event = record.get("event")
            if event in APPROVAL_EVENTS.values() and record_id not in bound:
                file = CONSENT if event == APPROVAL_EVENTS["customer"] else APPROVALS
                self.problem(f"sealed record {record_id} ({event}) is missing from {file}")
        if entries:
            self.note(
                "consent.json, approvals.json: people's usernames are informational (the sealed records "
                "name them by id)."
            )

    def _approval_bound(self, where: str, entry: dict[str, Any], role: str) -> int | None:
        """The id of the sealed record `entry` agrees with, or None (the problems said)."""
        record_id = entry.get("record")
        record = self.sealed.get(record_id) if type(record_id) is int else None
        if record is None:
            self.problem(f"{where} is bound to no sealed record (record {record_id!r} is not proven in the bundle)")
            return None
        expected_event = APPROVAL_EVENTS[role]
        if record.get("event") != expected_event:
            self.problem(f"{where} rests on record {record_id}, a {record.get('event')} record, not {expected_event}")
            return None
        basis = _object(record.get("approval_basis"))
        approver = _object(entry.get("approver"))
        pairs = {
            "role": (entry.get("role"), basis.get("role")),
            "approver id": (approver.get("id"), record.get("actor")),
            "digest": (entry.get("digest"), basis.get("digest")),
            "basis": (entry.get("basis"), basis.get("basis")),
            "subject_version": (entry.get("subject_version"), basis.get("subject_version")),
            "time": (entry.get("approved_at"), record.get("created_at")),
        }
        agrees = True
        for name, (held, sealed) in pairs.items():
            if held != sealed:
                self.problem(
                    f"{where}: its {name} is {_describe(held)}, sealed record {record_id} says {_describe(sealed)}"
                )
                agrees = False
        if role == "customer" and self.facts is not None and record.get("actor") != self.facts.get("actor"):
            self.problem(
                f"{where}: the consent is person {record.get('actor')}'s, the preview is person "
                f"{self.facts.get('actor')}'s"
            )
            agrees = False
        return record_id if agrees else None

    def _passkey(self, where: str, entry: dict[str, Any], record_id: int) -> None:
        """The approval's passkey signature, as the sealed record states it, checked offline; or the
        approval said to be unsigned."""
        basis = _object(self.sealed[record_id].get("approval_basis"))
        sealed, held = basis.get("passkey"), entry.get("passkey")
        if sealed is None and held is None:
            self.result.unsigned.append(f"{where} (record {record_id}): not signed with a passkey")
            return
        if held != sealed:
            state = "has no passkey" if held is None else "holds a passkey"
            said = "states one" if sealed is not None else "states none"
            self.problem(f"{where} {state}, and sealed record {record_id} {said} (or another)")
            return
        if not isinstance(sealed, dict):
            self.problem(f"{where}: sealed record {record_id}'s passkey is not a signature document")
            return
        # Imported here: only a bundle with a passkey signature needs py_webauthn.
        from approvals.audit.passkey_check import passkey_signature_problems

        digest = str(basis.get("digest"))
        problems = passkey_signature_problems(sealed, digest=digest, rp_id=self.rp_id, origins=self.origins)
        for problem in problems:
            self.problem(f"{where} (record {record_id}): passkey: {problem}")
        if problems:
            return
        self.result.signed.append(
            f"{where} (record {record_id}): signed with the passkey {sealed.get('passkey_name')!r} over digest "
            f"{digest[:12]}… (RP ID {sealed.get('rp_id')}, origin {sealed.get('origin')}); the signature verifies"
        )
        if sealed.get("counter_regressed"):
            self.note(
                f"{where}: the passkey's signature counter went backwards at this approval "
                f"({sealed.get('sign_count')}): the gateway flagged a possibly copied passkey."
            )

    # The execution and the provider --------------------------------------------------------------

    def _execution(self) -> None:
        execution = self._json(EXECUTION)
        if execution is None:
            return
        transitions = [rid for rid, record in sorted(self.sealed.items()) if "outcome_from" in _result(record)]
        record_id = execution.get("record")
        if record_id is None:
            if execution.get("outcome") is not None:
                self.problem(f"execution.json's outcome {execution.get('outcome')!r} is bound to no sealed record")
            if transitions:
                self.problem(
                    f"execution.json says nothing was executed; sealed record {transitions[-1]} says otherwise"
                )
            return
        record = self.sealed.get(record_id) if type(record_id) is int else None
        if record is None:
            self.problem(
                f"execution.json is bound to no sealed record (record {record_id!r} is not proven in the bundle)"
            )
            return
        if transitions and record_id != transitions[-1]:
            self.problem(
                f"execution.json rests on record {record_id}; the latest sealed execution record is {transitions[-1]}"
            )
        sealed = _result(record)
        pairs = {
            "outcome": (execution.get("outcome"), sealed.get("outcome")),
            "code": (execution.get("code") or "", sealed.get("code") or ""),
            "attempts": (execution.get("attempts"), sealed.get("attempt")),
        }
        if "effect" in sealed:
            pairs["effect"] = (execution.get("effect"), sealed.get("effect"))
        elif execution.get("effect") is not None:
            self.note(f"execution.json: its effect is informational (sealed record {record_id} states none).")
        for name, (held, stated) in pairs.items():
            if held != stated:
                self.problem(
                    f"execution.json's {name} is {_describe(held)}, sealed record {record_id} says {_describe(stated)}"
                )
        result = _object(execution.get("result"))
        for key, value in result.items():
            if key in sealed and sealed[key] != value:
                self.problem(
                    f"execution.json's result {key} is {_describe(value)}, sealed record {record_id} says "
                    f"{_describe(sealed[key])}"
                )
        self._rested_on(record_id, record)
        self.execution_record = (record_id, record)
        self.note("execution.json: detail, reference and performer are informational (in words, for people).")

    def _rested_on(self, record_id: int, record: dict[str, Any]) -> None:
        """Each approval the sealed execution record says it rested on is one of consent/approvals.json."""
        basis = record.get("approval_basis")
        if not isinstance(basis, dict):
            return
        held = {
            (entry.get("role"), (entry.get("approver") or {}).get("id"), entry.get("digest"), entry.get("basis"))
            for entry in self.approvals_held
        }
        for role, approvals in basis.items():
            for approval in approvals if isinstance(approvals, list) else []:
                key = (role, approval.get("approver"), approval.get("digest"), approval.get("basis"))
                if key not in held:
                    self.problem(
                        f"sealed record {record_id} says the execution rested on person {approval.get('approver')}'s "
                        f"{role} approval, which consent.json and approvals.json do not hold"
                    )

    def _provider(self) -> None:
        provider = self._json(PROVIDER)
        if provider is None:
            return
        references = _object(provider.get("references"))
        stated: list[dict[str, Any]] = []
        where = "no sealed record"
        if self.execution_record is not None:
            record_id, record = self.execution_record
            sealed = _result(record)
            stated = [_object(sealed.get("effect")), sealed]
            where = f"sealed record {record_id}"
        bound, loose = [], []
        for key, value in references.items():
            found = next((source[key] for source in stated if key in source), _MISSING)
            if found is _MISSING:
                loose.append(key)
            elif found != value:
                self.problem(f"provider.json's {key} is {_describe(value)}, {where} says {_describe(found)}")
            else:
                bound.append(key)
        events = provider.get("events") if isinstance(provider.get("events"), list) else []
        loose_events = []
        for event in events:
            event_id = event.get("event_id") if isinstance(event, dict) else None
            matches = [
                record for record in self.sealed.values() if event_id and _result(record).get("event_id") == event_id
            ]
            if not matches:
                loose_events.append(str(event_id))
            elif any(_result(record).get("type") != event.get("type") for record in matches):
                self.problem(
                    f"provider.json's event {event_id} is of type {_describe(event.get('type'))}, its sealed record "
                    f"says {_describe(_result(matches[0]).get('type'))}"
                )
        if bound:
            self.note(f"provider.json: {', '.join(bound)} agree with {where}.")
        if loose:
            self.note(f"provider.json: {', '.join(loose)} are informational (no sealed record states them).")
        if loose_events:
            self.note(f"provider.json: events {', '.join(loose_events)} are informational (no sealed record of them).")


def _object(value: Any) -> dict[str, Any]:
    """A JSON object of a file, or an empty one for anything else (the comparisons then say what differs)."""
    return value if isinstance(value, dict) else {}


def _result(record: dict[str, Any]) -> dict[str, Any]:
    return _object(record.get("result"))


# The command line ----------------------------------------------------------------------------------


def verifier_keys_read(values: Sequence[str], *, what: str) -> list[tlog.VerifierKey]:
    """Verifier keys given as `<name>+<key ID>+<key>`, or as the path of a file holding one a line."""
    keys = []
    for value in values:
        path = Path(value)
        try:
            lines = path.read_text(encoding="utf-8").split() if path.is_file() else [value]
        except OSError as error:
            raise ValueError(f"can't read {what} {value}: {error}") from error
        for line in lines:
            try:
                keys.append(tlog.verifier_key_parse(line))
            except tlog.FormatError as error:
                raise ValueError(f"bad {what} {line!r}: {error}") from error
    return keys


def check_report(check: EvidenceCheck) -> tuple[list[str], list[str]]:
    """What the command prints: (lines for stdout, lines for stderr), each failure on its own line."""
    if not check.valid:
        return [], [f"INVALID: {problem}" for problem in check.problems]
    checkpoint = check.checkpoint
    assert checkpoint is not None  # a valid bundle's checkpoint verified
    cosigned = f", cosigned by {', '.join(check.cosigners)}" if check.cosigners else ""
    lines = [
        f"Evidence valid: {check.records} audit records of preview {check.preview} are in the log "
        f"{checkpoint.origin}, tree of {checkpoint.size}, root {base64.b64encode(checkpoint.root).decode()}, signed by "
        f"{', '.join(check.log_keys)}{cosigned}."
    ]
    lines += [f"Passkey: {line}" for line in check.signed + check.unsigned]
    lines += [f"Informational: {note}" for note in check.notes]
    return lines, []


class TextOut(Protocol):
    """Where lines go: sys.stdout, or a management command's stdout."""

    def write(self, text: str, /) -> object: ...


def run(argv: Sequence[str] | None, out: TextOut, err: TextOut) -> int:
    parser = argparse.ArgumentParser(
        prog="verify_evidence",
        description="Check an evidence bundle offline, with the log's verifier key taken from elsewhere.",
    )
    parser.add_argument("file", metavar="FILE", help="the bundle (a zip)")
    parser.add_argument(
        "--log-key",
        metavar="VKEY",
        action="append",
        required=True,
        help="the log's verifier key <origin>+<key ID>+<key> (or a file of them); repeat for a rotated key",
    )
    parser.add_argument(
        "--witness-key", metavar="VKEY", action="append", default=[], help="a witness's cosignature verifier key"
    )
    parser.add_argument("--quorum", metavar="N", type=int, help="how many of the witness keys must cosign (all)")
    parser.add_argument("--rp-id", metavar="RP_ID", help="the WebAuthn RP ID passkey signatures must name")
    parser.add_argument(
        "--origin", metavar="ORIGIN", action="append", default=[], help="an origin passkey signatures may name"
    )
    args = parser.parse_args(argv)
    return verify(
        args.file, args.log_key, args.witness_key, args.quorum, out=out, err=err, rp_id=args.rp_id, origins=args.origin
    )


def verify(
    file: str,
    log_keys: Sequence[str],
    witness_keys: Sequence[str],
    quorum: int | None,
    *,
    out: TextOut,
    err: TextOut,
    rp_id: str | None = None,
    origins: Sequence[str] = (),
) -> int:
    """Check the bundle in `file`; 0 when valid, 1 when not (each failure on its own line of `err`)."""
    try:
        logs = verifier_keys_read(log_keys, what="--log-key")
        witnesses = verifier_keys_read(witness_keys, what="--witness-key")
        if quorum is not None and not 0 <= quorum <= len(witnesses):
            raise ValueError(
                f"--quorum {quorum} asks for more cosignatures than the {len(witnesses)} witness keys given"
            )
        files = bundle_read(file)
    except (ValueError, EvidenceUnreadable) as error:
        err.write(f"INVALID: can't check the bundle: {error}\n")
        return 1
    check = evidence_check(files, logs, witnesses, quorum=quorum, rp_id=rp_id, origins=origins or None)
    stdout, stderr = check_report(check)
    for line in stdout:
        out.write(line + "\n")
    for line in stderr:
        err.write(line + "\n")
    return 0 if not stderr else 1


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m approvals.audit.evidence_check FILE --log-key VKEY`: the same check as `manage.py
    verify_evidence`, without Django or its settings."""
    return run(argv, sys.stdout, sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
