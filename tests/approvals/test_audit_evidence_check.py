"""The evidence bundle's offline checker on bundles made here, with proofs from approvals.audit.tlog: what
binds each file to the sealed records, the witness policy, a key rotation, and the checker run with no
Django at all. (tests/approvals/test_audit_evidence.py checks the bundles the gateway exports.)"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from approvals.audit import tlog
from approvals.audit.evidence_check import (
    EVIDENCE_FORMAT,
    bundle_read,
    evidence_check,
    proof_file,
    record_file,
)
from approvals.core.digests import canonical_bytes, canonical_json

ORIGIN = "shop.example/audit"
PREVIEW = "6f1d2c4e-0b5a-4c8e-9a51-3f0e7d9b2a10"
OTHER_PREVIEW = "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"
CUSTOMER = 3
NEW_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OLD_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
WITNESS_A = Ed25519PrivateKey.from_private_bytes(bytes(range(2, 34)))
WITNESS_B = Ed25519PrivateKey.from_private_bytes(bytes(range(3, 35)))

FACTS = {
    "id": PREVIEW,
    "action": "refund_order",
    "actor": CUSTOMER,
    "subject_type": "order",
    "subject_id": "o-12",
    "subject_version": 1,
    "payload": {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"},
    "amount_minor": 500,
    "currency": "EUR",
    "required_approvals": ["customer"],
    "expires_at": "2026-08-10T12:15:00+00:00",
}
DIGEST = hashlib.sha256(canonical_json(FACTS).encode()).hexdigest()
EFFECT = {"refund_id": "re_1", "amount_minor": 500, "currency": "EUR", "refund_status": "succeeded"}


def vkey(private: Ed25519PrivateKey) -> tlog.VerifierKey:
    return tlog.verifier_key(ORIGIN, private.public_key())


def witness_vkey(name: str, private: Ed25519PrivateKey) -> tlog.VerifierKey:
    return tlog.verifier_key(name, private.public_key(), tlog.SIGNATURE_COSIGNATURE_V1)


def record(record_id: int, event: str, *, preview: str = PREVIEW, basis: Any = None, **result: Any) -> dict[str, Any]:
    return {
        "id": record_id,
        "created_at": f"2026-08-10T12:00:{record_id:02d}.000000+00:00",
        "event": event,
        "action": "refund_order",
        "preview": preview,
        "actor": CUSTOMER if event in ("proposed", "confirmed") else None,
        "agent_session": None,
        "subject_type": "order",
        "subject_id": "o-12",
        "raw_arguments": "",
        "approval_basis": basis,
        "result": result,
    }


def log_records() -> list[dict[str, Any]]:
    """The log: this preview's records, and one of another preview between them."""
    transition = {"outcome_from": "pending", "outcome": "in_progress", "status": "approved", "attempt": 1}
    return [
        record(1, "proposed", status="awaiting_customer", digest=DIGEST),
        record(2, "proposed", preview=OTHER_PREVIEW, status="awaiting_customer", digest="0" * 64),
        record(
            3,
            "confirmed",
            basis={"role": "customer", "digest": DIGEST, "basis": "", "subject_version": 1},
            status="approved",
        ),
        record(4, "execution_started", **transition, fencing_token=1),
        record(
            5,
            "executed",
            basis={"customer": [{"approver": CUSTOMER, "digest": DIGEST, "basis": ""}]},
            refund_id="re_1",
            order_id="o-12",
            amount_minor=500,
            currency="EUR",
            outcome_from="in_progress",
            outcome="succeeded",
            status="executed",
            attempt=1,
            fencing_token=1,
            effect=EFFECT,
        ),
    ]


class Log:
    """An in-memory log of canonical records, its checkpoint signed by `keys`, cosigned by `witnesses`."""

    def __init__(self, records, keys=(NEW_KEY,), witnesses=()):
        self.entries = [canonical_bytes(content) for content in records]
        self.index = {content["id"]: i for i, content in enumerate(records)}
        leaves = b"".join(tlog.entry_leaf_hash(entry) for entry in self.entries)
        self.tree = tlog.TreeHashes(lambda level, index: leaves if (level, index) == (0, 0) else b"", len(self.entries))
        checkpoint = tlog.Checkpoint(ORIGIN, len(self.entries), self.tree.root())
        note = tlog.checkpoint_sign(checkpoint, list(keys))
        lines = [tlog.cosignature_sign(name, key, 1786000000, note.text) for name, key in witnesses]
        self.note = tlog.Note(note.text, note.signatures + tuple(lines)).serialize()

    def proof(self, record_id: int, *, as_index: int | None = None) -> str:
        index = self.index[record_id] if as_index is None else as_index
        hashes = tuple(self.tree.inclusion_proof(index))
        return tlog.TlogProof(index, hashes, self.note, self.entries[self.index[record_id]]).text()


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def bundle(log: Log | None = None, *, record_ids=(1, 3, 4, 5)) -> dict[str, bytes]:
    log = log or Log(log_records())
    files: dict[str, bytes] = {}
    for record_id in record_ids:
        files[record_file(record_id)] = log.entries[log.index[record_id]]
        files[proof_file(record_id)] = log.proof(record_id).encode()
    files["checkpoint.txt"] = log.note.encode()
    files["digest-input.json"] = canonical_json(FACTS).encode()
    files["preview.json"] = _json({**FACTS, "digest": DIGEST, "status": "executed", "actor_username": "alice"})
    approval = {
        "role": "customer",
        "approver": {"id": CUSTOMER, "username": "alice"},
        "basis": "",
        "digest": DIGEST,
        "subject_version": 1,
        "approved_at": "2026-08-10T12:00:03.000000+00:00",
        "record": 3,
    }
    files["consent.json"] = _json({"required": True, "given": True, **approval})
    files["approvals.json"] = _json({"approvals": []})
    files["execution.json"] = _json(
        {
            "outcome": "succeeded",
            "attempts": 1,
            "code": "",
            "effect": EFFECT,
            "result": {"refund_id": "re_1"},
            "record": 5,
        }
    )
    files["provider.json"] = _json(
        {"references": {"refund_id": "re_1", "amount_minor": 500, "status_now": "succeeded"}, "events": []}
    )
    files["README.txt"] = b"read me\n"
    return with_manifest(files)


def with_manifest(files: dict[str, bytes]) -> dict[str, bytes]:
    files = {name: content for name, content in files.items() if name != "manifest.json"}
    listed = [{"name": name, "sha256": hashlib.sha256(content).hexdigest()} for name, content in sorted(files.items())]
    manifest = {"format": EVIDENCE_FORMAT, "preview": PREVIEW, "files": listed}
    return {"manifest.json": _json(manifest), **files}


def edited(files: dict[str, bytes], name: str, change) -> dict[str, bytes]:
    """The bundle with one JSON file changed (and the manifest made to match, so only the change shows)."""
    value = json.loads(files[name])
    change(value)
    return with_manifest({**files, name: _json(value)})


def problems(files, keys=None, witnesses=(), quorum=None) -> list[str]:
    return evidence_check(files, list(keys or [vkey(NEW_KEY)]), list(witnesses), quorum=quorum).problems


def test_a_consistent_bundle_is_valid_and_says_what_is_informational():
    check = evidence_check(bundle(), [vkey(NEW_KEY)])
    assert check.problems == []
    assert (check.preview, check.records, check.checkpoint.size) == (PREVIEW, 4, 5)
    assert check.log_keys == (f"{ORIGIN}+{vkey(NEW_KEY).key_id.hex()}",)
    assert "preview.json: actor_username, status are informational (the digest does not cover them)." in check.notes
    assert "provider.json: amount_minor, refund_id agree with sealed record 5." in check.notes
    assert "provider.json: status_now are informational (no sealed record states them)." in check.notes


@pytest.mark.parametrize(
    ("name", "change", "expected"),
    [
        pytest.param(
            "preview.json",
            lambda v: v.update(amount_minor=50000),
            "preview.json's amount_minor is 50000, the digest covers 500",
            id="preview-amount",
        ),
        pytest.param(
            "consent.json",
            lambda v: v.update(approver={"id": 9, "username": "mallory"}),
            "consent.json: its approver id is 9, sealed record 3 says 3",
            id="consent-approver",
        ),
        pytest.param(
            "consent.json",
            lambda v: v.update(record=4),
            "consent.json rests on record 4, a execution_started record, not confirmed",
            id="consent-other-record",
        ),
        pytest.param(
            "consent.json",
            lambda v: v.update(required=False),
            "consent.json says the customer's confirmation is not required; the digest's required_approvals "
            'say ["customer"]',
            id="consent-not-required",
        ),
        pytest.param(
            "execution.json",
            lambda v: v["effect"].update(amount_minor=5000),
            'execution.json\'s effect is {"amount_minor": 5000, "currency": "EUR", "refund_id": "re_1", '
            '"refund_status": "succeeded"}, sealed record 5 says {"amount_minor": 500, "currency": "EUR", '
            '"refund_id": "re_1", "refund_status": "succeeded"}',
            id="execution-effect",
        ),
        pytest.param(
            "execution.json",
            lambda v: v.update(record=4),
            "execution.json rests on record 4; the latest sealed execution record is 5",
            id="execution-older-record",
        ),
        pytest.param(
            "provider.json",
            lambda v: v["references"].update(refund_id="re_forged"),
            'provider.json\'s refund_id is "re_forged", sealed record 5 says "re_1"',
            id="provider-reference",
        ),
    ],
)
def test_a_file_that_disagrees_with_its_sealed_record_is_refused(name, change, expected):
    assert expected in problems(edited(bundle(), name, change))


def test_the_digest_must_recompute_and_be_the_sealed_one():
    files = bundle()
    forged = {**FACTS, "amount_minor": 50000}
    files = with_manifest({**files, "digest-input.json": canonical_json(forged).encode()})
    found = problems(files)
    forged_digest = hashlib.sha256(canonical_json(forged).encode()).hexdigest()
    assert f"record 1 states the digest {DIGEST}; digest-input.json hashes to {forged_digest}" in found
    assert f"preview.json's digest is {DIGEST}; digest-input.json hashes to {forged_digest}" in found


def test_an_approval_left_out_of_the_bundle_is_missed():
    files = edited(bundle(), "consent.json", lambda v: v.update(given=False))
    assert problems(files) == [
        "sealed record 3 (confirmed) is missing from consent.json",
        "sealed record 5 says the execution rested on person 3's customer approval, which consent.json and "
        "approvals.json do not hold",
    ]


def test_a_record_not_in_canonical_form_is_refused():
    files = bundle()
    pretty = _json(json.loads(files[record_file(1)]))
    found = problems(with_manifest({**files, record_file(1): pretty}))
    assert "records/1.json is not in canonical form (RFC 8785): it is not the record as sealed" in found
    assert "records/1.tlog-proof: its extra data is not records/1.json" in found


def test_the_witness_policy_counts_the_cosignatures_of_the_keys_given():
    log = Log(log_records(), witnesses=[("witness-a.example", WITNESS_A)])
    files = bundle(log)
    a, b = witness_vkey("witness-a.example", WITNESS_A), witness_vkey("witness-b.example", WITNESS_B)

    check = evidence_check(files, [vkey(NEW_KEY)], [a, b], quorum=1)
    assert check.problems == [] and check.cosigners == (f"witness-a.example+{a.key_id.hex()}",)
    found = problems(files, witnesses=[a, b])  # quorum: all of them
    assert "checkpoint.txt: 1 of the witnesses given cosigned its checkpoint, 2 are required" in found
    assert "records/5.tlog-proof: 1 of the witnesses given cosigned its checkpoint, 2 are required" in found

    impostor = witness_vkey("witness-a.example", WITNESS_B)  # the name, another key: not this witness
    assert "checkpoint.txt: 0 of the witnesses given cosigned its checkpoint, 1 are required" in problems(
        files, witnesses=[impostor]
    )


def test_during_a_rotation_either_key_verifies_and_a_wrong_one_does_not():
    files = bundle(Log(log_records(), keys=(NEW_KEY, OLD_KEY)))
    assert problems(files, keys=[vkey(OLD_KEY)]) == []
    assert problems(files, keys=[vkey(NEW_KEY)]) == []
    assert problems(files, keys=[vkey(OLD_KEY), vkey(NEW_KEY)]) == []
    found = problems(files, keys=[vkey(Ed25519PrivateKey.generate())])
    assert "checkpoint.txt: no signature of a trusted key" in found
    assert "records/1.tlog-proof: no signature of a trusted key" in found


def test_a_key_of_another_log_names_another_origin():
    other = tlog.verifier_key("other.example/log", NEW_KEY.public_key())
    assert f"checkpoint.txt: the checkpoint's origin {ORIGIN!r} is the name of no log key given" in problems(
        bundle(), keys=[other]
    )


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def test_a_zip_with_a_name_twice_is_not_read(tmp_path):
    from approvals.audit.evidence_check import EvidenceUnreadable

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("consent.json", b"{}")
        with pytest.warns(UserWarning, match="Duplicate name"):
            archive.writestr("consent.json", b'{"given": true}')
    with pytest.raises(EvidenceUnreadable, match="consent.json is in the zip twice"):
        bundle_read(buffer.getvalue())
    with pytest.raises(EvidenceUnreadable, match="not a readable zip file"):
        bundle_read(b"not a zip")


def test_the_checker_runs_without_django(tmp_path):
    root = Path(__file__).resolve().parents[2]
    path = tmp_path / "evidence.zip"
    path.write_bytes(_zip(bundle()))
    key = vkey(NEW_KEY).text()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "approvals.audit.evidence_check", str(path), *args]
        # No DJANGO_SETTINGS_MODULE, no SECRET_KEY, no database: the checker needs none.
        return subprocess.run(command, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, cwd=root)

    done = run("--log-key", key)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Evidence valid: 4 audit records of preview {PREVIEW} are in the log {ORIGIN}")
    imports = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, approvals.audit.evidence_check; print(sorted({m.split('.')[0] for m in sys.modules}))",
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd=root,
    )
    assert "'django'" not in imports.stdout and "'approvals'" in imports.stdout, imports

    path.write_bytes(_zip(edited(bundle(), "consent.json", lambda v: v.update(given=False))))
    done = run("--log-key", key)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "INVALID: sealed record 3 (confirmed) is missing from consent.json",
        "INVALID: sealed record 5 says the execution rested on person 3's customer approval, which consent.json "
        "and approvals.json do not hold",
    ]
    done = run("--log-key", "not-a-key")
    assert done.returncode == 1
    assert done.stderr.startswith("INVALID: can't check the bundle: bad --log-key 'not-a-key'")


def test_a_verifier_key_whose_base64_holds_a_plus_is_read():
    """Go's note.NewVerifier splits a key at its first two pluses: the base64 after them may hold more."""
    key = vkey(NEW_KEY)
    assert "+" in key.text().split("+", 2)[2]
    assert tlog.verifier_key_parse(key.text()) == key


def test_verify_evidence_takes_a_witness_policy(tmp_path):
    from approvals.audit.evidence_check import verify

    path = tmp_path / "evidence.zip"
    path.write_bytes(_zip(bundle(Log(log_records(), witnesses=[("witness-a.example", WITNESS_A)]))))
    a = witness_vkey("witness-a.example", WITNESS_A).text()
    b = witness_vkey("witness-b.example", WITNESS_B).text()
    key_file = tmp_path / "log.vkey"
    key_file.write_text(vkey(OLD_KEY).text() + "\n" + vkey(NEW_KEY).text() + "\n")  # a file of keys

    def check(witnesses, quorum):
        out, err = io.StringIO(), io.StringIO()
        code = verify(str(path), [str(key_file)], witnesses, quorum, out=out, err=err)
        return code, out.getvalue().splitlines(), err.getvalue().splitlines()

    code, out, _err = check([a, b], 1)
    assert code == 0 and out[0].endswith(f"cosigned by witness-a.example+{a.split('+')[1]}.")
    code, out, err = check([a, b], None)
    assert (code, out) == (1, [])
    assert err[0] == "INVALID: checkpoint.txt: 1 of the witnesses given cosigned its checkpoint, 2 are required"
    code, _out, err = check([a], 2)
    assert code == 1
    assert err == [
        "INVALID: can't check the bundle: --quorum 2 asks for more cosignatures than the 1 witness keys given"
    ]


def test_a_passkey_signature_no_sealed_record_states_is_refused():
    """A bundle's passkey must be the one its sealed record states (tests/approvals/test_audit_evidence_passkeys.py
    checks real signatures); an approval with none is said to be unsigned."""
    check = evidence_check(bundle(), [vkey(NEW_KEY)])
    assert check.problems == []
    assert [line.split(": ", 1)[1] for line in check.unsigned] == ["not signed with a passkey"]
    files = edited(bundle(), "consent.json", lambda v: v.update(passkey={"authenticator_data": "..."}))
    check = evidence_check(files, [vkey(NEW_KEY)])
    assert len(check.problems) == 1
    assert check.problems[0].startswith("consent.json holds a passkey, and sealed record ")
    assert check.problems[0].endswith(" states none (or another)")
