"""Receipts: a preview's audit records with inclusion proofs against a signed tree head, for the agent
session that proposed it, checked offline by `manage.py verify_receipt` with the public key alone."""

import copy
import json
from io import StringIO

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.management import call_command

from approvals.audit import tlog
from approvals.audit.log import RECEIPT_FORMAT, public_key_text, receipt_check, record_content
from approvals.audit.seal import public_key
from approvals.core.digests import canonical_bytes
from approvals.models import AuditEvent, AuditLeaf, AuditRecord, AuditTreeHead
from tests.conftest import agent_client_for, propose


def _verify_receipt(path, *args):
    out, err = StringIO(), StringIO()
    try:
        call_command("verify_receipt", str(path), *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue() + err.getvalue()
    return 0, out.getvalue() + err.getvalue()


def _public_key_text():
    out = StringIO()
    call_command("audit_public_key", stdout=out)
    return out.getvalue().strip()


@pytest.fixture
def proposed(alice_agent, o12):
    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")  # repeated: a second record
    return response.json()["preview"]["id"]


def test_the_receipt_proves_the_previews_records_against_a_signed_head(alice_agent, proposed):
    response = alice_agent.get(f"/api/agent/previews/{proposed}/receipt")
    assert response.status_code == 200, response.content
    receipt = response.json()

    assert receipt["format"] == RECEIPT_FORMAT and receipt["preview"] == proposed
    records = AuditRecord.objects.filter(preview_id=proposed).order_by("id")
    assert [entry["record"]["id"] for entry in receipt["records"]] == [r.pk for r in records]
    assert [entry["record"]["event"] for entry in receipt["records"]] == [
        AuditEvent.PROPOSED,
        AuditEvent.PROPOSAL_REPEATED,
    ]
    assert receipt["unsealed_records"] == 0
    assert receipt["tree_head"] == AuditTreeHead.objects.order_by("-size").first().as_checkpoint()
    check = receipt_check(receipt, public_key())
    assert check.valid and check.records == 2, check.problems


def test_verify_receipt_checks_it_offline_with_the_public_key(
    alice_agent, proposed, tmp_path, django_assert_max_num_queries
):
    receipt = alice_agent.get(f"/api/agent/previews/{proposed}/receipt").json()
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(receipt))
    key = _public_key_text()

    with django_assert_max_num_queries(0):  # no database
        code, output = _verify_receipt(path, "--public-key", key)
    assert code == 0 and "Receipt valid: 2 audit records" in output, output
    key_file = tmp_path / "audit.pub"
    key_file.write_text(key + "\n")
    assert _verify_receipt(path, "--public-key", str(key_file))[0] == 0

    code, output = _verify_receipt(path, "--public-key", public_key_text(Ed25519PrivateKey.generate()))
    assert code == 1 and "not signed by this key" in output


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda r: r["records"][0]["record"].update(event="declined"), id="record-edited"),
        pytest.param(lambda r: r["records"][1]["record"]["result"].update(status="approved"), id="result-edited"),
        pytest.param(lambda r: r["tree_head"].update(timestamp=r["tree_head"]["timestamp"] + 1), id="head-time"),
        pytest.param(lambda r: r["tree_head"].update(size=r["tree_head"]["size"] + 1), id="head-size"),
        pytest.param(lambda r: r["records"][0]["inclusion_proof"].reverse(), id="proof"),
        pytest.param(
            lambda r: r["records"][0].update(tlog_proof=r["records"][1]["tlog_proof"]), id="tlog-proof-swapped"
        ),
        pytest.param(
            lambda r: r["records"][0].update(tlog_proof=r["records"][0]["tlog_proof"].replace("index ", "index 1")),
            id="tlog-proof-index",
        ),
        pytest.param(
            lambda r: r["records"][0].update(
                tlog_proof=r["records"][0]["tlog_proof"].replace("extra ", "extra e30", 1)
            ),
            id="tlog-proof-extra",
        ),
        pytest.param(lambda r: r["records"].clear(), id="no-records"),
        pytest.param(lambda r: r.pop("tree_head"), id="malformed"),
    ],
)
def test_a_tampered_receipt_is_invalid(alice_agent, proposed, tmp_path, tamper):
    receipt = alice_agent.get(f"/api/agent/previews/{proposed}/receipt").json()
    forged = copy.deepcopy(receipt)
    tamper(forged)
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(forged))
    code, output = _verify_receipt(path, "--public-key", _public_key_text())
    assert code == 1 and "INVALID" in output, output


def test_each_record_carries_a_tlog_proof_of_its_canonical_bytes(alice_agent, proposed):
    receipt = alice_agent.get(f"/api/agent/previews/{proposed}/receipt").json()
    key = public_key()
    origin = settings.AUDIT_LOG_ORIGIN
    for entry in receipt["records"]:
        text = entry["tlog_proof"]
        assert text.startswith("c2sp.org/tlog-proof@v1\nextra ")
        entry_bytes = canonical_bytes(entry["record"])
        proof, verified = tlog.tlog_proof_verify(text, entry_bytes, [tlog.verifier_key(origin, key)], origin=origin)
        assert proof.extra == entry_bytes and proof.index == entry["leaf_index"]
        assert verified.checkpoint.size == receipt["tree_head"]["size"]
        assert proof.checkpoint_note == receipt["tree_head"]["note"]
        with pytest.raises(tlog.FormatError, match="is not in the checkpointed tree"):
            tlog.tlog_proof_verify(text, entry_bytes + b" ", [tlog.verifier_key(origin, key)])
        with pytest.raises(tlog.FormatError, match="no signature of a trusted key"):
            tlog.tlog_proof_verify(
                text, entry_bytes, [tlog.verifier_key(origin, Ed25519PrivateKey.generate().public_key())]
            )


def test_a_receipt_issued_before_the_c2sp_formats_still_verifies(alice_agent, proposed, tmp_path):
    """Format v1: pymerkle's inclusion proofs, no note. Made here as the gateway made them then."""
    from approvals.audit.log import RECEIPT_FORMAT_V1, LeafTree

    alice_agent.get(f"/api/agent/previews/{proposed}/receipt")  # seals the records
    head = AuditTreeHead.objects.order_by("-size").first()
    leaves = [bytes.fromhex(h) for h in AuditLeaf.objects.order_by("index").values_list("leaf_hash", flat=True)]
    tree = LeafTree(leaves)
    records = AuditRecord.objects.filter(preview_id=proposed).select_related("leaf").order_by("id")
    receipt = {
        "format": RECEIPT_FORMAT_V1,
        "preview": proposed,
        "tree_head": {k: v for k, v in head.as_checkpoint().items() if k != "note"},
        "records": [
            {
                "leaf_index": r.leaf.index,
                "record": record_content(r),
                "inclusion_proof": tree.inclusion_proof(r.leaf.index, head.size),
            }
            for r in records
        ],
        "unsealed_records": 0,
    }
    path = tmp_path / "receipt-v1.json"
    path.write_text(json.dumps(receipt))
    code, output = _verify_receipt(path, "--public-key", _public_key_text())
    assert code == 0 and "Receipt valid: 2 audit records" in output, output
    receipt["records"][0]["record"]["event"] = "declined"
    path.write_text(json.dumps(receipt))
    code, output = _verify_receipt(path, "--public-key", _public_key_text())
    assert code == 1 and "is not in the signed tree" in output, output


def test_another_sessions_preview_has_no_receipt(alice, alice_agent, bob_agent, proposed):
    assert bob_agent.get(f"/api/agent/previews/{proposed}/receipt").status_code == 404
    other_session_of_alice = agent_client_for(alice)
    assert other_session_of_alice.get(f"/api/agent/previews/{proposed}/receipt").status_code == 404
    assert alice_agent.get("/api/agent/previews/not-a-uuid/receipt").status_code == 404
    assert alice_agent.get(f"/api/agent/previews/{proposed}/receipt").status_code == 200


def test_a_receipt_needs_the_agents_token(client, proposed):
    assert client.get(f"/api/agent/previews/{proposed}/receipt").status_code == 401


def test_the_receipt_is_checked_without_django_too(alice_agent, proposed, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    receipt = alice_agent.get(f"/api/agent/previews/{proposed}/receipt").json()
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(receipt))
    env = {"PATH": "/usr/bin:/bin"}  # no DJANGO_SETTINGS_MODULE, no SECRET_KEY, no database
    run = subprocess.run(
        [sys.executable, "-m", "approvals.audit.log", str(path), "--public-key", _public_key_text()],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
    )
    assert run.returncode == 0 and "Receipt valid: 2 audit records" in run.stdout, run.stderr
    receipt["records"][0]["record"]["event"] = "declined"
    path.write_text(json.dumps(receipt))
    run = subprocess.run(
        [sys.executable, "-m", "approvals.audit.log", str(path), "--public-key", _public_key_text()],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
    )
    assert run.returncode == 1 and "INVALID" in run.stderr
