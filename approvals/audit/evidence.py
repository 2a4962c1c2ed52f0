"""A preview's evidence bundle: the zip a shop hands to a card network in a dispute, which anyone checks
offline, years later, with the log's verifier key alone (approvals.audit.evidence_check says what is
checked; docs/audit.md "Evidence bundles" says it for people).

It is built from the preview's receipt (its sealed audit records, each with its c2sp.org/tlog-proof
against one checkpoint) and what the database says about the preview, its approvals, its execution and,
through the action's `provider_evidence` hook, the outside world's references to the effect.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from string import Template
from typing import Any

from django.conf import settings
from django.utils import timezone

from approvals.audit import evidence_check as layout
from approvals.audit.seal import log_verifier_keys, preview_receipt
from approvals.core.digests import canonical_bytes, canonical_json
from approvals.core.registry import registry
from approvals.core.services.passkeys import signature_document
from approvals.core.services.previews import preview_digest_facts
from approvals.models import Approval, ApprovalRole, ApprovalSignature, Execution, Preview

# The Go program the README gives for checking a proof with Go's own packages (kept as a file, so that
# it can be built as it is).
GO_PROGRAM = Path(__file__).with_name("evidence_checkproof.go")


class EvidenceNotSealed(Exception):
    """Some of the preview's audit records are not sealed yet: a bundle now would leave them out."""

    def __init__(self, unsealed: int) -> None:
        super().__init__(
            f"{unsealed} audit record(s) of this preview are not sealed into a published checkpoint yet; export "
            "again in a moment (sealing takes about a second, witnesses' cosignatures a little longer)."
        )
        self.unsealed = unsealed


@dataclass(frozen=True)
class EvidenceBundle:
    content: bytes  # the zip
    filename: str
    records: int
    tree_size: int


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True) + "\n").encode()


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="microseconds") if moment else None


def evidence_bundle(preview: Preview) -> EvidenceBundle:
    """The preview's evidence bundle; raises EvidenceNotSealed while records of it wait for the sealer."""
    receipt = preview_receipt(preview)
    if receipt["unsealed_records"] or receipt["tree_head"] is None:
        raise EvidenceNotSealed(receipt["unsealed_records"] or 1)
    sealed = {entry["record"]["id"]: entry["record"] for entry in receipt["records"]}
    files: dict[str, bytes] = {}
    for entry in receipt["records"]:
        record_id = entry["record"]["id"]
        files[layout.record_file(record_id)] = canonical_bytes(entry["record"])
        files[layout.proof_file(record_id)] = entry["tlog_proof"].encode()
    files[layout.CHECKPOINT] = receipt["tree_head"]["note"].encode()
    files[layout.LOG_KEYS] = "".join(key.text() + "\n" for key in log_verifier_keys()).encode()
    witnesses = [entry.split("=", 1)[0].strip() for entry in settings.AUDIT_WITNESSES]
    if witnesses:
        files[layout.WITNESS_KEYS] = "".join(key + "\n" for key in witnesses).encode()

    digest_input = canonical_json(preview_digest_facts(preview)).encode()
    files[layout.DIGEST_INPUT] = digest_input
    files[layout.PREVIEW] = _json_bytes(_preview_facts(preview))
    consent, approvals = _approvals(preview, sealed)
    files[layout.CONSENT] = _json_bytes(consent)
    files[layout.APPROVALS] = _json_bytes({"approvals": approvals})
    execution = Execution.objects.filter(preview=preview).first()
    files[layout.EXECUTION] = _json_bytes(_execution(preview, execution, sealed))
    files[layout.PROVIDER] = _json_bytes(_provider(preview, execution))

    tree_size = receipt["tree_head"]["size"]
    files[layout.README] = _readme(preview, tree_size, witnesses).encode()
    manifest = {
        "format": layout.EVIDENCE_FORMAT,
        "preview": str(preview.pk),
        "exported_at": _iso(timezone.now()),
        "log_origin": receipt["tree_head"]["note"].split("\n", 1)[0],
        "tree_size": tree_size,
        "files": [
            {"name": name, "sha256": layout.sha256_hex(content), "bytes": len(content)}
            for name, content in sorted(files.items())
        ],
    }
    return EvidenceBundle(
        content=_zip({layout.MANIFEST: _json_bytes(manifest), **dict(sorted(files.items()))}),
        filename=f"evidence-{preview.pk}.zip",
        records=len(sealed),
        tree_size=tree_size,
    )


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    stamp = timezone.now().astimezone(UTC).timetuple()[:6]
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for name, content in files.items():
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            bundle.writestr(info, content)
    return buffer.getvalue()


def _username(user: Any) -> str | None:
    return user.get_username() if user is not None else None


def _preview_facts(preview: Preview) -> dict[str, Any]:
    action = registry.action(preview.action)
    return {
        "id": str(preview.pk),
        "action": preview.action,
        "headline": action.headline(preview) if action else preview.action,
        "actor": preview.actor_id,
        "actor_username": _username(preview.actor),
        "subject_type": preview.subject_type,
        "subject_id": preview.subject_id,
        "subject_version": preview.subject_version,
        "payload": preview.payload,
        "amount_minor": preview.amount_minor,
        "currency": preview.currency,
        "required_approvals": preview.required_approvals,
        "staff_approvals_needed": preview.staff_approvals_needed,
        "expires_at": preview.expires_at.isoformat(),
        "origin": preview.origin,
        "proposed_by": preview.proposed_by_id,
        "supersedes": str(preview.supersedes_id) if preview.supersedes_id else None,
        "chain_root": str(preview.chain_root_id) if preview.chain_root_id else None,
        "digest": preview.digest,
        "status": preview.status,
        "failure_code": preview.failure_code,
        "failure_reason": preview.failure_reason,
        "created_at": _iso(preview.created_at),
        "executed_at": _iso(preview.executed_at),
        "result": preview.result,
    }


def _approvals(preview: Preview, sealed: dict[int, dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """consent.json (the customer's approval) and approvals.json's entries (staff's), each with the
    sealed record that states it."""
    used: set[int] = set()
    consent: dict[str, Any] = {
        "required": ApprovalRole.CUSTOMER in preview.required_approvals,
        "given": False,
    }
    staff: list[dict[str, Any]] = []
    rows = Approval.objects.filter(preview=preview).select_related("approver", "signature").order_by("created_at", "pk")
    for approval in rows:
        record_id = _approval_record(approval, sealed, used)
        entry = {
            "role": approval.role,
            "approver": {"id": approval.approver_id, "username": _username(approval.approver)},
            "basis": approval.basis,
            "digest": approval.digest,
            "subject_version": approval.subject_version,
            "approved_at": sealed[record_id]["created_at"] if record_id is not None else _iso(approval.created_at),
            "record": record_id,
            "lapsed_at": _iso(approval.lapsed_at),
            "lapsed_reason": approval.lapsed_reason,
        }
        signature = ApprovalSignature.objects.filter(approval=approval).first()
        if signature is not None:  # the same document the sealed record's approval_basis holds
            entry["passkey"] = signature_document(signature)
        if approval.role == ApprovalRole.CUSTOMER and not consent["given"]:
            consent.update(given=True, **entry)
        else:
            staff.append(entry)
    return consent, staff


def _approval_record(approval: Approval, sealed: dict[int, dict[str, Any]], used: set[int]) -> int | None:
    """The first sealed record not matched yet that records exactly this approval."""
    event = layout.APPROVAL_EVENTS.get(approval.role)
    for record_id, record in sorted(sealed.items()):
        basis = record.get("approval_basis") or {}
        if (
            record_id not in used
            and record["event"] == event
            and record["actor"] == approval.approver_id
            and basis.get("role") == approval.role
            and basis.get("digest") == approval.digest
            and basis.get("basis") == approval.basis
        ):
            used.add(record_id)
            return record_id
    return None


def _execution(preview: Preview, execution: Execution | None, sealed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    if execution is None:
        return {"outcome": None, "record": None, "status": preview.status}
    transitions = [record_id for record_id, record in sorted(sealed.items()) if "outcome_from" in record["result"]]
    action = registry.action(preview.action)
    return {
        "outcome": execution.outcome,
        "attempts": execution.attempt,
        "code": execution.code,
        "detail": execution.detail,
        "effect": execution.effect,
        "reference": action.effect_reference(execution.effect) if action else "",
        "performer": action.effect_performer if action else "",
        "executed_at": _iso(preview.executed_at),
        "result": preview.result,
        "record": transitions[-1] if transitions else None,
    }


def _provider(preview: Preview, execution: Execution | None) -> dict[str, Any]:
    action = registry.action(preview.action)
    evidence = action.provider_evidence(preview) if action and execution else None
    facts: dict[str, Any] = {
        "action": preview.action,
        "performer": action.effect_performer if action else "",
        "references": evidence.references if evidence else {},
        "events": evidence.events if evidence else [],
    }
    if evidence is None:
        facts["note"] = "No references of the action's own: execution.json holds the effect as reported."
    return facts


def _readme(preview: Preview, tree_size: int, witnesses: list[str]) -> str:
    witness_line = (
        "  witness-keys.txt   the witnesses' cosignature keys configured when it was exported (information).\n"
        if witnesses
        else ""
    )
    return README_TEXT.substitute(
        preview=preview.pk,
        origin=settings.AUDIT_LOG_ORIGIN,
        tree_size=tree_size,
        witness_line=witness_line,
        go_program=GO_PROGRAM.read_text(encoding="utf-8"),
    )


README_TEXT = Template(
    """\
Evidence bundle of preview $preview
======================================================================

What this is
------------
A shop used an approval gateway: an AI agent proposed an action (a refund, an invoice email), a
person approved exactly what was shown to them, and the gateway carried it out. Everything the
gateway did about it is an audit record in an append-only transparency log, $origin, whose
checkpoints are signed (Ed25519, c2sp.org/signed-note) and may be cosigned by independent witnesses.
This bundle holds those records, the proof that each one is in the log, and what they are about.

Get the log's verifier key from somewhere other than this bundle: the shop's published key
(`manage.py audit_public_key --note` prints it, a line `$origin+<key ID>+<key>`), a witness
network's listing, or the shop's letter to you. log-keys.txt inside is for information only.

The files
---------
  manifest.json      every other file with its SHA-256 and size (catches a damaged or partial bundle;
                     not signed: the log's signature over the records is the proof).
  records/<id>.json  each audit record of the preview, in its canonical JSON (RFC 8785): the exact
                     bytes that were logged. Its leaf hash is SHA-256(0x00 || the file's bytes).
  records/<id>.tlog-proof
                     its c2sp.org/tlog-proof@v1: `extra` (base64 of records/<id>.json), the leaf
                     index, the RFC 6962 inclusion proof (one base64 hash a line) and, after a blank
                     line, the log's signed checkpoint (a tree of $tree_size records when exported).
  checkpoint.txt     that checkpoint (c2sp.org/tlog-checkpoint) with the witnesses' cosignatures.
  preview.json       the proposed action as stored: who, what, how much, its status and result.
  digest-input.json  the exact bytes of the preview's digest: SHA-256 of this file is the digest the
                     person approved (JSON, keys sorted, no spaces, UTF-8). The records `proposed`,
                     `confirmed` and `approved` state that digest: what was approved is bound to the log.
  consent.json       the customer's confirmation: `required`, `given`, who (`approver`), when, the
                     digest they confirmed, and `record`, the `confirmed` record that states it.
  approvals.json     each staff approval: approver, basis (a person's review, a standing approval),
                     digest, and `record`, the `approved` record that states it.
                     An approval given with a passkey (at or above the shop's step-up amounts) carries
                     `passkey`: the credential's public key (COSE), what the authenticator signed
                     (authenticatorData, clientDataJSON), the signature, the challenge's nonce and the
                     digests it commits to; the sealed record's approval_basis holds the same. An entry
                     without `passkey` was not signed with one.
  execution.json     what happened: the outcome, the effect the provider reported, and `record`, the
                     record of the execution's last step, which states them.
  provider.json      the provider's own references (a refund's id at the payment provider and the
                     provider's events about it; the Message-ID the mail server accepted). A value the
                     `executed` record also states must be equal to it; the rest (a refund's status
                     now, the provider's raw events) is informational.
  log-keys.txt       the log's verifier keys when it was exported (information: do not trust these).
$witness_line
How to check it
---------------
1. With the gateway's own tools (no database, no network):
     python manage.py verify_evidence evidence-$preview.zip --log-key '$origin+<key ID>+<key>'
   or without Django, from the gateway's source (approvals/audit/evidence_check.py, tlog.py and
   approvals/core/digests.py; Python 3.11 or newer with the packages `cryptography` and `rfc8785`;
   for passkey signatures also approvals/audit/passkey_check.py, approvals/core/passkey_challenge.py
   and the package `webauthn`):
     python -m approvals.audit.evidence_check evidence-$preview.zip --log-key '<vkey>'
   Add `--witness-key <vkey>` (repeatable) and `--quorum N` to require witness cosignatures, and
   give `--log-key` twice for a log that rotated its key (the old and the new one). `--rp-id` and
   `--origin` (repeatable) require the passkey signatures to name the shop's own relying party and
   site. Exit 0: valid; exit 1: each failure on its own line. Lines marked Informational say what no
   record binds; lines marked Passkey say which approvals a passkey signed and which it did not.

2. By hand, with stock tools:
   - The digest: `sha256sum digest-input.json` is preview.json's `digest`, and the `digest` in the
     `proposed` record's result and in the `approval_basis` of `confirmed` and `approved` records.
   - A record's leaf hash: `(printf '\\000'; cat records/<id>.json) | sha256sum`.
   - A tlog proof: any C2SP tlog-proof verifier; the Go program below, built on Go's
     golang.org/x/mod/sumdb/note and golang.org/x/mod/sumdb/tlog; or `aics-tlog` (PyPI, Python 3.12+),
     given the proof's hash lines and index:
       sed -n '/^index /,/^$$/{/^index /d;/^$$/d;p;}' records/<id>.tlog-proof > hashes.txt
       aics-tlog verify-inclusion --leaf records/<id>.json --proof hashes.txt \\
         --index "$$(sed -n 's/^index //p' records/<id>.tlog-proof)" --checkpoint checkpoint.txt --log-key '<vkey>'
   - Each record's `preview` is $preview; consent.json, approvals.json and execution.json name the
     record (`record`) whose fields they repeat: compare them.
   - A passkey signature (WebAuthn): the challenge is SHA-256 of the bytes
     "approval-gateway-step-up/v1\\n" + nonce + "\\n" + the digests (64 hex characters each, joined
     by "\\n"), which clientDataJSON's `challenge` holds (base64url); authenticatorData starts with
     SHA-256 of the RP ID and its flags byte has UP (0x01) and UV (0x04) set; the signature is ECDSA
     (or the key's COSE algorithm) over authenticatorData + SHA-256(clientDataJSON).

A bundle proves that the records it holds are in the log, unchanged, as of its checkpoint. It does
not prove that no other record of this preview exists: for that, ask the shop for a newer bundle.

A Go program for one proof
--------------------------
Save as main.go next to a go.mod (`go mod init checkproof && go get golang.org/x/mod@latest`), then
  go run . '<vkey>' records/<id>.json records/<id>.tlog-proof

$go_program"""
)
