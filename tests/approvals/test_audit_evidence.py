"""Evidence bundles: the zip of one preview for a dispute (`GET /console/previews/<id>/evidence`, `manage.py
export_evidence`), checked offline by `manage.py verify_evidence` with the log's verifier key alone and no
database; every tampering refused with its own line; a key rotation that old evidence survives."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from io import StringIO
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError

from approvals.audit import tlog
from approvals.audit.evidence import GO_PROGRAM
from approvals.audit.evidence_check import bundle_read, evidence_check, proof_file, record_file
from approvals.audit.log import private_key_from, public_key_text, record_content
from approvals.audit.seal import log_verifier_keys
from approvals.core.digests import canonical_bytes
from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditRecord, Preview, PreviewStatus
from invoices.models import Delivery, Invoice, InvoiceContact, InvoiceLine, InvoiceStatus, StandingApproval
from invoices.permissions import INVOICE_APPROVERS
from refunds.events import local_refund_status_set
from refunds.models import ProviderEvent, Refund
from refunds.permissions import REFUND_REVIEWERS
from tests.conftest import agent_client_for, propose, seal_all
from tests.factories import StaffFactory

ROOT = Path(__file__).resolve().parents[2]


# Making and reading bundles ---------------------------------------------------------------------------


def refund_of_o12_executed(alice, agent, capture, *, amount_minor: int = 500) -> Preview:
    """Alice's agent proposes a refund on o-12, Alice confirms it, it is paid; the provider then sends
    an event about it; everything is sealed."""
    response = propose(agent, order_id="o-12", amount_minor=amount_minor, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    with capture(execute=True):
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    refund = Refund.objects.get(preview=preview)
    assert local_refund_status_set(refund_id=refund.gateway_refund_id, status="succeeded").result == "unchanged"
    seal_all()
    return preview


def export(preview: Preview, path: Path) -> Path:
    out = StringIO()
    call_command("export_evidence", str(preview.pk), "-o", str(path), stdout=out)
    assert out.getvalue().startswith(f"Wrote {path}: "), out.getvalue()
    return path


def note_keys() -> list[str]:
    out = StringIO()
    call_command("audit_public_key", "--note", stdout=out)
    return out.getvalue().split()


def verify(path: Path, *log_keys: str, extra: tuple[str, ...] = ()) -> tuple[int, list[str], list[str]]:
    """verify_evidence's exit code, stdout lines and stderr lines."""
    args = [str(path)]
    for key in log_keys:
        args += ["--log-key", key]
    out, err = StringIO(), StringIO()
    try:
        call_command("verify_evidence", *args, *extra, stdout=out, stderr=err)
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, out.getvalue().splitlines(), err.getvalue().splitlines()


def rezip(files: dict[str, bytes], path: Path, *, manifest: bool = True) -> Path:
    """Write the files as a bundle; with `manifest`, its hashes made to match (so only the change shows)."""
    if manifest:
        listing = json.loads(files["manifest.json"])
        listing["files"] = [
            {"name": name, "sha256": hashlib.sha256(content).hexdigest(), "bytes": len(content)}
            for name, content in sorted(files.items())
            if name != "manifest.json"
        ]
        files = {**files, "manifest.json": json.dumps(listing).encode()}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    path.write_bytes(buffer.getvalue())
    return path


def record_of(preview: Preview, event: str) -> AuditRecord:
    return AuditRecord.objects.filter(preview=preview, event=event).order_by("-id").first()


@pytest.fixture
def executed(alice, o12, alice_agent, django_capture_on_commit_callbacks) -> Preview:
    return refund_of_o12_executed(alice, alice_agent, django_capture_on_commit_callbacks)


@pytest.fixture
def bundle_path(executed, tmp_path) -> Path:
    return export(executed, tmp_path / "evidence.zip")


# A valid bundle ---------------------------------------------------------------------------------------


def test_the_bundle_of_an_executed_refund_holds_everything_and_verifies(executed, bundle_path):
    files = bundle_read(bundle_path)
    records = list(AuditRecord.objects.filter(preview=executed).order_by("id"))
    assert [record.event for record in records] == [
        "proposed",
        "confirmed",
        "execution_started",
        "executed",
        "provider_event",
    ]
    assert sorted(files) == sorted(
        [
            "manifest.json",
            "README.txt",
            "preview.json",
            "digest-input.json",
            "consent.json",
            "approvals.json",
            "execution.json",
            "provider.json",
            "checkpoint.txt",
            "log-keys.txt",
            *[record_file(record.pk) for record in records],
            *[proof_file(record.pk) for record in records],
        ]
    )
    manifest = json.loads(files["manifest.json"])
    assert manifest["preview"] == str(executed.pk)
    assert {entry["name"]: entry["sha256"] for entry in manifest["files"]} == {
        name: hashlib.sha256(content).hexdigest() for name, content in files.items() if name != "manifest.json"
    }
    # Each record as logged: its canonical bytes, and the proof's extra is them.
    for record in records:
        assert files[record_file(record.pk)] == canonical_bytes(record_content(record))
        proof = tlog.tlog_proof_parse(files[proof_file(record.pk)].decode())
        assert proof.extra == files[record_file(record.pk)] and proof.index == record.leaf.index
    assert hashlib.sha256(files["digest-input.json"]).hexdigest() == executed.digest
    assert json.loads(files["preview.json"])["digest"] == executed.digest

    consent = json.loads(files["consent.json"])
    confirmed = record_of(executed, "confirmed")
    assert (consent["required"], consent["given"], consent["record"]) == (True, True, confirmed.pk)
    assert consent["approver"] == {"id": executed.actor_id, "username": "alice"}
    assert "passkey" not in consent  # issue 32 adds the customer's passkey signature here
    assert json.loads(files["approvals.json"]) == {"approvals": []}  # 5.00 needs no staff
    execution = json.loads(files["execution.json"])
    refund = Refund.objects.get(preview=executed)
    assert execution["outcome"] == "succeeded" and execution["record"] == record_of(executed, "executed").pk
    assert execution["effect"]["refund_id"] == refund.gateway_refund_id
    provider = json.loads(files["provider.json"])
    assert provider["references"]["refund_id"] == refund.gateway_refund_id
    assert provider["references"]["idempotency_key"] == f"refund:{executed.pk}"
    event = ProviderEvent.objects.get()
    assert [e["event_id"] for e in provider["events"]] == [event.event_id]
    assert provider["events"][0]["payload"] == event.payload
    readme = files["README.txt"].decode()
    assert f"Evidence bundle of preview {executed.pk}" in readme and "verify_evidence" in readme
    assert "tlog.CheckRecord" in readme and "passkey" in readme
    assert files["log-keys.txt"].decode().split() == note_keys()

    code, out, err = verify(bundle_path, *note_keys())
    assert (code, err) == (0, []), err
    assert out[0].startswith(
        f"Evidence valid: 5 audit records of preview {executed.pk} are in the log 127.0.0.1:8000/audit, tree of "
    )
    assert f"Informational: provider.json: events {event.event_id} are informational" not in out  # it is sealed
    assert "Informational: provider.json: amount_minor, currency, order_id, refund_id agree with sealed record " in (
        " ".join(out)
    )


def test_verify_evidence_uses_no_database(bundle_path, django_db_blocker):
    keys = note_keys()
    with django_db_blocker.block():  # any database access raises
        code, out, err = verify(bundle_path, *keys)
    assert (code, err) == (0, []), err

    # A process whose database does not exist: nothing connects to it.
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:9/nowhere",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "verify_evidence", str(bundle_path), "--log-key", keys[0]],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Evidence valid: 5 audit records")


def test_the_checker_without_django_agrees(bundle_path):
    done = subprocess.run(
        [sys.executable, "-m", "approvals.audit.evidence_check", str(bundle_path), "--log-key", note_keys()[0]],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Evidence valid: 5 audit records")


def test_the_proofs_check_with_an_independent_implementation(executed, bundle_path, tmp_path):
    """aics-tlog (another implementation of the C2SP formats, in .venv-c2sp) checks a record of the bundle
    with its own code, run exactly as the README tells the recipient, in the unpacked bundle."""
    from tests.c2sp import C2SP_BIN, peers_missing

    assert peers_missing() is None, peers_missing()
    files = bundle_read(bundle_path)
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(content)
    readme = files["README.txt"].decode().splitlines()
    start = next(i for i, line in enumerate(readme) if line.strip().startswith("sed -n '/^index "))
    script = "\n".join(line.strip() for line in readme[start : start + 3])
    assert script.splitlines()[1].startswith("aics-tlog verify-inclusion")
    confirmed = record_of(executed, "confirmed").pk

    def run(key: str, record: int = confirmed) -> subprocess.CompletedProcess[str]:
        command = script.replace("<id>", str(record)).replace("'<vkey>'", shlex.quote(key))
        env = {**os.environ, "PATH": f"{C2SP_BIN}:{os.environ['PATH']}"}
        return subprocess.run(["bash", "-ec", command], capture_output=True, text=True, cwd=tmp_path, env=env)

    done = run(note_keys()[0])
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["ok"] is True
    assert run(tlog.verifier_key("127.0.0.1:8000/audit", forged_key()).text()).returncode != 0
    (tmp_path / record_file(confirmed)).write_bytes(files[record_file(confirmed)].replace(b"customer", b"Customer"))
    assert run(note_keys()[0]).returncode != 0


GO_MOD_SOURCES = Path("/usr/share/gocode/src/golang.org/x/mod/sumdb/tlog")  # Debian's golang-golang-x-mod-dev


@pytest.mark.skipif(
    shutil.which("go") is None or not GO_MOD_SOURCES.is_dir(),
    reason="needs Go and golang.org/x/mod (Debian: apt-get install golang-go golang-golang-x-mod-dev)",
)
def test_the_readmes_go_program_checks_a_proof_with_gos_own_packages(executed, bundle_path, tmp_path):
    """The Go program the README gives, built with Go's own golang.org/x/mod/sumdb/{note,tlog}."""
    files = bundle_read(bundle_path)
    program = tmp_path / "main.go"
    program.write_text(GO_PROGRAM.read_text())
    assert GO_PROGRAM.read_text() in files["README.txt"].decode()
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"/usr/share/gocode:{tmp_path / 'gopath'}"}
    env.update(GOCACHE=str(tmp_path / "gocache"), GOFLAGS="", GOPROXY="off")
    built = subprocess.run(
        ["go", "build", "-o", str(tmp_path / "checkproof"), str(program)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    confirmed = record_of(executed, "confirmed").pk
    for name in (record_file(confirmed), proof_file(confirmed)):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(files[name])

    def run(key: str, record: str, proof: str) -> subprocess.CompletedProcess[str]:
        command = [str(tmp_path / "checkproof"), key, str(tmp_path / record), str(tmp_path / proof)]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    done = run(note_keys()[0], record_file(confirmed), proof_file(confirmed))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"OK: {tmp_path / record_file(confirmed)} is leaf ")
    wrong = tlog.verifier_key("127.0.0.1:8000/audit", forged_key()).text()
    done = run(wrong, record_file(confirmed), proof_file(confirmed))
    assert done.returncode == 1 and done.stderr.startswith("INVALID: the checkpoint: "), done.stderr
    changed = files[record_file(confirmed)].replace(b"customer", b"Customer")
    (tmp_path / record_file(confirmed)).write_bytes(changed)
    done = run(note_keys()[0], record_file(confirmed), proof_file(confirmed))
    assert done.returncode == 1 and "extra data is not" in done.stderr, done.stderr
    proof = tlog.tlog_proof_parse(files[proof_file(confirmed)].decode())
    forged = tlog.TlogProof(proof.index, proof.hashes, proof.checkpoint_note, changed).text()
    (tmp_path / proof_file(confirmed)).write_text(forged)  # the extra made to match: the leaf is not in the tree
    done = run(note_keys()[0], record_file(confirmed), proof_file(confirmed))
    assert done.returncode == 1 and f"is not leaf {proof.index} of the tree of" in done.stderr, done.stderr


# Who may take it ---------------------------------------------------------------------------------------


def test_the_console_gives_the_bundle_to_the_previews_reviewers_only(executed, client, alice):
    reviewer = StaffFactory(username="rita")
    reviewer.groups.add(Group.objects.get(name=REFUND_REVIEWERS))
    invoice_approver = StaffFactory(username="ivy")
    invoice_approver.groups.add(Group.objects.get(name=INVOICE_APPROVERS))
    url = f"/console/previews/{executed.pk}/evidence"

    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    client.force_login(alice)  # the customer: no console
    assert client.get(url).status_code == 403
    client.force_login(invoice_approver)  # staff, but refunds are not theirs to see
    assert client.get(url).status_code == 404
    client.force_login(reviewer)
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"] == f'attachment; filename="evidence-{executed.pk}.zip"'
    check = evidence_check(bundle_read(response.content), log_verifier_keys())
    assert check.valid and check.records == 5, check.problems
    assert url in client.get(f"/console/previews/{executed.pk}/").content.decode()
    assert url in client.get(f"/console/previews/{executed.pk}/audit/").content.decode()


def test_a_bundle_waits_for_the_seal(executed, alice_agent, tmp_path, settings, client):
    propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")  # a record of another preview
    AuditRecord.objects.create(event="reviewers_notified", preview=executed, result={})  # not sealed
    with pytest.raises(
        CommandError, match=r"1 audit record\(s\) of this preview are not sealed into a published checkpoint yet"
    ):
        call_command("export_evidence", str(executed.pk), "-o", str(tmp_path / "early.zip"))
    assert not (tmp_path / "early.zip").exists()

    settings.CELERY_TASK_ALWAYS_EAGER = False  # a sealer process seals, not the view
    reviewer = StaffFactory(username="rita")
    reviewer.groups.add(Group.objects.get(name=REFUND_REVIEWERS))
    client.force_login(reviewer)
    response = client.get(f"/console/previews/{executed.pk}/evidence")
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert "not sealed into a published checkpoint yet" in response.content.decode()
    with pytest.raises(CommandError, match="No preview 00000000-0000-0000-0000-000000000000"):
        call_command("export_evidence", "00000000-0000-0000-0000-000000000000", "-o", str(tmp_path / "x.zip"))
    with pytest.raises(CommandError, match="No preview not-a-uuid"):
        call_command("export_evidence", "not-a-uuid", "-o", str(tmp_path / "x.zip"))


def test_a_declined_preview_has_a_bundle_too(alice, o12, alice_agent, tmp_path):
    """Nothing was executed: the bundle proves the proposal and the customer's no."""
    from approvals.core.services import preview_decline

    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    preview_decline(preview_id=preview.pk, person=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    seal_all()
    path = export(preview, tmp_path / "declined.zip")
    files = bundle_read(path)
    assert json.loads(files["consent.json"]) == {"required": True, "given": False}
    assert json.loads(files["execution.json"]) == {"outcome": None, "record": None, "status": "declined"}
    assert json.loads(files["provider.json"])["references"] == {}
    code, out, err = verify(path, *note_keys())
    assert (code, err) == (0, []), err
    assert out[0].startswith(f"Evidence valid: 2 audit records of preview {preview.pk}")
    assert "Informational: consent.json: the customer has not confirmed (yet)." in out


# Tampering, each refused with its own line ---------------------------------------------------------------


def test_a_changed_byte_in_a_record_is_refused(executed, bundle_path, tmp_path):
    files = bundle_read(bundle_path)
    executed_record = record_of(executed, "executed").pk
    name = record_file(executed_record)
    assert files[name].count(b'"amount_minor":500') >= 1
    files[name] = files[name].replace(b'"amount_minor":500', b'"amount_minor":900', 1)  # one byte
    code, out, err = verify(rezip(files, tmp_path / "forged.zip"), *note_keys())
    assert code == 1 and out == []
    leaf = executed.audit_records.get(pk=executed_record).leaf.index
    assert f"INVALID: records/{executed_record}.tlog-proof: its extra data is not {name}" in err
    assert (
        f"INVALID: records/{executed_record}.tlog-proof: SHA-256(0x00 || {name}) is not leaf {leaf} of the "
        "checkpointed tree of " in " ".join(err)
    )
    assert (
        f"INVALID: execution.json is bound to no sealed record (record {executed_record} is not proven in the bundle)"
        in err
    )


def test_a_record_of_another_preview_added_is_refused(
    executed, alice, alice_agent, tmp_path, django_capture_on_commit_callbacks
):
    other = refund_of_o12_executed(alice, alice_agent, django_capture_on_commit_callbacks, amount_minor=300)
    theirs = bundle_read(export(other, tmp_path / "other.zip"))
    files = bundle_read(export(executed, tmp_path / "evidence.zip"))  # against the same checkpoint
    stranger = record_of(other, "proposed").pk
    files[record_file(stranger)] = theirs[record_file(stranger)]
    files[proof_file(stranger)] = theirs[proof_file(stranger)]
    code, _out, err = verify(rezip(files, tmp_path / "forged.zip"), *note_keys())
    assert code == 1
    assert err == [f"INVALID: records/{stranger}.json is about preview {other.pk}, not {executed.pk}"]


def test_a_proof_for_another_leaf_is_refused(executed, bundle_path, tmp_path):
    files = bundle_read(bundle_path)
    confirmed, proposed = record_of(executed, "confirmed").pk, record_of(executed, "proposed").pk
    theirs = tlog.tlog_proof_parse(files[proof_file(proposed)].decode())
    # The proposal's index and path, with the confirmation as its data.
    files[proof_file(confirmed)] = (
        tlog.TlogProof(theirs.index, theirs.hashes, theirs.checkpoint_note, files[record_file(confirmed)])
        .text()
        .encode()
    )
    code, _out, err = verify(rezip(files, tmp_path / "forged.zip"), *note_keys())
    assert code == 1
    assert err[0].startswith(
        f"INVALID: records/{confirmed}.tlog-proof: SHA-256(0x00 || records/{confirmed}.json) is not leaf "
        f"{theirs.index} of the checkpointed tree of "
    )
    assert f"INVALID: consent.json is bound to no sealed record (record {confirmed} is not proven in the bundle)" in err


def test_a_checkpoint_signed_with_a_wrong_key_is_refused(executed, bundle_path, tmp_path):
    files = bundle_read(bundle_path)
    note = tlog.note_parse(files["checkpoint.txt"].decode())
    forged = tlog.note_sign(note.text, [(tlog.checkpoint_parse(note.text).origin, Ed25519PrivateKey.generate())])
    files["checkpoint.txt"] = forged.serialize().encode()
    proofs = [name for name in files if name.endswith(".tlog-proof")]
    for name in proofs:
        proof = tlog.tlog_proof_parse(files[name].decode())
        files[name] = tlog.TlogProof(proof.index, proof.hashes, forged.serialize(), proof.extra).text().encode()
    code, _out, err = verify(rezip(files, tmp_path / "forged.zip"), *note_keys())
    assert code == 1
    assert err[0] == "INVALID: checkpoint.txt: no signature of a trusted key"
    assert sorted(line for line in err if "tlog-proof" in line) == sorted(
        f"INVALID: {name}: no signature of a trusted key" for name in proofs
    )
    # The genuine bundle, checked with a key that is not the log's, is refused the same way.
    code, _out, err = verify(bundle_path, tlog.verifier_key("127.0.0.1:8000/audit", forged_key()).text())
    assert code == 1 and err[0] == "INVALID: checkpoint.txt: no signature of a trusted key"


def forged_key():
    return Ed25519PrivateKey.generate().public_key()


def test_a_manifest_hash_mismatch_is_refused(bundle_path, tmp_path):
    files = bundle_read(bundle_path)
    files["README.txt"] += b"Call this number to confirm the refund.\n"
    code, _out, err = verify(rezip(files, tmp_path / "forged.zip", manifest=False), *note_keys())
    manifest = {entry["name"]: entry["sha256"] for entry in json.loads(files["manifest.json"])["files"]}
    actual = hashlib.sha256(files["README.txt"]).hexdigest()
    assert code == 1
    assert err == [f"INVALID: README.txt: its SHA-256 is {actual}, the manifest says {manifest['README.txt']}"]


def test_a_missing_file_is_refused(executed, bundle_path, tmp_path):
    files = bundle_read(bundle_path)
    executed_record = record_of(executed, "executed").pk
    del files[proof_file(executed_record)]
    code, _out, err = verify(rezip(files, tmp_path / "forged.zip", manifest=False), *note_keys())
    assert code == 1
    assert f"INVALID: records/{executed_record}.tlog-proof is listed in the manifest but missing from the bundle" in err
    assert (
        f"INVALID: records/{executed_record}.json has no records/{executed_record}.tlog-proof: it is not proven to "
        "be in the log" in err
    )


def test_a_consent_that_names_another_person_is_refused(executed, bundle_path, tmp_path, bob):
    files = bundle_read(bundle_path)
    consent = json.loads(files["consent.json"])
    consent["approver"] = {"id": bob.pk, "username": "bob"}
    files["consent.json"] = json.dumps(consent).encode()
    code, _out, err = verify(rezip(files, tmp_path / "forged.zip"), *note_keys())
    confirmed = record_of(executed, "confirmed").pk
    assert code == 1
    assert (
        f"INVALID: consent.json: its approver id is {bob.pk}, sealed record {confirmed} says {executed.actor_id}" in err
    )


# An invoice send ------------------------------------------------------------------------------------------


def test_the_bundle_of_an_invoice_send_on_a_standing_approval(alice, tmp_path, django_capture_on_commit_callbacks):
    sam = StaffFactory(username="sam")
    sam.groups.add(Group.objects.get(name=INVOICE_APPROVERS))
    invoice = Invoice.objects.create(
        number="INV-17", customer=alice, currency="EUR", status=InvoiceStatus.ISSUED, total_minor=12000
    )
    InvoiceLine.objects.create(invoice=invoice, position=1, description="Consulting", quantity=1, unit_minor=12000)
    InvoiceContact.objects.create(invoice=invoice, email="billing@example.test")
    standing = StandingApproval.objects.create(invoice=invoice, recipient="billing@example.test", approved_by=sam)
    agent = agent_client_for(alice, tools=("send_invoice",))
    with django_capture_on_commit_callbacks(execute=True):
        response = propose(agent, "send_invoice", invoice_id="INV-17", recipient="billing@example.test")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    assert preview.status == PreviewStatus.EXECUTED
    seal_all()

    path = export(preview, tmp_path / "invoice.zip")
    files = bundle_read(path)
    assert json.loads(files["consent.json"]) == {"required": False, "given": False}
    (approval,) = json.loads(files["approvals.json"])["approvals"]
    approved = record_of(preview, "approved")
    assert (approval["role"], approval["approver"], approval["record"]) == (
        "staff",
        {"id": sam.pk, "username": "sam"},
        approved.pk,
    )
    assert approval["basis"].startswith(f"standing approval #{standing.pk} for INV-17 to billing@example.test")
    delivery = Delivery.objects.get(preview=preview)
    provider = json.loads(files["provider.json"])
    assert provider["performer"] == "the mail server" and provider["events"] == []
    assert provider["references"]["message_id"] == delivery.message_id
    assert provider["references"]["recipients"] == ["billing@example.test"]
    assert json.loads(files["execution.json"])["reference"] == f"message id {delivery.message_id}"

    code, out, err = verify(path, *note_keys())
    assert (code, err) == (0, []), err
    assert (
        "Informational: provider.json: content_digest, invoice_version, message_id, recipients, subject agree "
        f"with sealed record {record_of(preview, 'executed').pk}." in out
    )
    assert "Informational: provider.json: sent_at are informational (no sealed record states them)." in out

    provider["references"]["recipients"] = ["someone-else@example.test"]
    files["provider.json"] = json.dumps(provider).encode()
    code, _out, err = verify(rezip(files, tmp_path / "forged.zip"), *note_keys())
    assert code == 1
    assert err == [
        'INVALID: provider.json\'s recipients is ["someone-else@example.test"], sealed record '
        f'{record_of(preview, "executed").pk} says ["billing@example.test"]'
    ]


# Key rotation ------------------------------------------------------------------------------------------


def _new_private_key_text() -> str:
    raw = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return base64.b64encode(raw).decode()


def test_evidence_survives_a_key_rotation(
    alice, o12, alice_agent, settings, tmp_path, django_capture_on_commit_callbacks
):
    old, new = settings.AUDIT_SIGNING_KEY, _new_private_key_text()
    origin = settings.AUDIT_LOG_ORIGIN
    old_vkey = tlog.verifier_key(origin, private_key_from(old).public_key()).text()
    new_vkey = tlog.verifier_key(origin, private_key_from(new).public_key()).text()
    capture = django_capture_on_commit_callbacks

    before = export(refund_of_o12_executed(alice, alice_agent, capture, amount_minor=100), tmp_path / "before.zip")
    assert verify(before, old_vkey)[0] == 0

    # During the rotation: both keys (the new one first) sign every checkpoint.
    settings.AUDIT_SIGNING_KEY = f"{new},{old}"
    assert note_keys() == [new_vkey, old_vkey]
    during = export(refund_of_o12_executed(alice, alice_agent, capture, amount_minor=200), tmp_path / "during.zip")
    signers = tlog.note_parse(bundle_read(during)["checkpoint.txt"].decode()).signatures
    assert [line.key_id for line in signers] == [tlog.verifier_key_parse(k).key_id for k in (new_vkey, old_vkey)]
    assert verify(during, old_vkey)[0] == 0
    assert verify(during, new_vkey)[0] == 0

    # After it: the new key alone signs; the old one is retired, still listed as the log's.
    settings.AUDIT_SIGNING_KEY = new
    settings.AUDIT_SIGNING_KEYS_RETIRED = [public_key_text(private_key_from(old))]
    assert [key.text() for key in log_verifier_keys()] == [new_vkey, old_vkey]
    after_preview = refund_of_o12_executed(alice, alice_agent, capture, amount_minor=300)
    after = export(after_preview, tmp_path / "after.zip")

    code, out, err = verify(before, old_vkey)  # exported before the rotation, checked after it
    assert (code, err) == (0, []) and out[0].startswith("Evidence valid: 5 audit records"), err
    assert verify(after, new_vkey)[0] == 0
    code, _out, err = verify(after, old_vkey)
    assert code == 1 and err[0] == "INVALID: checkpoint.txt: no signature of a trusted key"
    assert verify(after, old_vkey, new_vkey)[0] == 0  # a verifier that knows both keys takes either

    # The log itself still checks across the rotation.
    out = StringIO()
    call_command("verify_audit", "--full", stdout=out)
    assert out.getvalue().startswith("Audit log intact: "), out.getvalue()
