"""The audit log is a Merkle tree with signed tree heads: records are sealed once each, PostgreSQL refuses
to edit, delete or truncate them, and verify_audit finds every kind of tampering with the first bad index."""

import base64
import hashlib
import json
import os
from io import StringIO

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from approvals.audit.log import (
    LOG_ID,
    LeafTree,
    canonical_bytes,
    leaf_hash,
    public_key_text,
    record_content,
    sign_tree_head,
    tree_head_message,
    tree_head_signature_valid,
)
from approvals.audit.seal import audit_seal, public_key
from approvals.audit.tiles import tiles_extend
from approvals.core.services import audit_record
from approvals.models import AuditEvent, AuditLeaf, AuditRecord, AuditTile, AuditTreeHead, AuditVerification, Preview
from tests.conftest import propose, seal_all, tampering


def _run(command, *args):
    out, err = StringIO(), StringIO()
    try:
        call_command(command, *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue() + err.getvalue()
    return 0, out.getvalue() + err.getvalue()


def _verify(*args):
    return _run("verify_audit", *args)


def _delete_record(pk):
    """DELETE the row itself (the ORM would refuse first: a leaf protects its record)."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM approvals_auditrecord WHERE id = %s", [pk])


def _tiles_rebuilt(size=None):
    """What a thorough attacker does after changing leaves: lay the tiles out again over them."""
    leaves = [bytes.fromhex(h) for h in AuditLeaf.objects.order_by("index").values_list("leaf_hash", flat=True)]
    AuditTile.objects.all().delete()
    tiles_extend(0, leaves[:size])


def _checkpoints_file(tmp_path):
    """The tree heads as they were published: what a witness outside the database kept."""
    path = tmp_path / "checkpoints.jsonl"
    path.write_text("".join(json.dumps(head.as_checkpoint()) + "\n" for head in AuditTreeHead.objects.all()))
    return str(path)


@pytest.fixture
def some_history(alice_agent, o12, ord4417):
    propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    seal_all()  # a first tree head
    propose(alice_agent, order_id="ORD-4417", amount_minor=24990, reason="damaged")
    propose(alice_agent, order_id="o-99", amount_minor=1, reason="late")
    seal_all()
    return list(AuditRecord.objects.select_related("leaf").order_by("leaf__index"))


# The encoding, the tree and the signature ---------------------------------------------------------


def test_the_canonical_encoding_is_rfc_8785():
    value = {"b": 1.0, "a": [1e21, "é\u2028", None, True], "c": {"z": -0.0, "y": 1e-7}}
    assert canonical_bytes(value) == rfc8785.dumps(value)
    assert canonical_bytes(value) == '{"a":[1e+21,"é\u2028",null,true],"b":1,"c":{"y":1e-7,"z":0}}'.encode()
    assert leaf_hash({"x": 1}) == hashlib.sha256(b'\x00{"x":1}').digest()


def _rfc9162_root(leaves):
    """MTH of RFC 9162 section 2.1.1, written out independently of pymerkle."""
    if len(leaves) == 1:
        return leaves[0]
    split = 1
    while split * 2 < len(leaves):
        split *= 2
    return hashlib.sha256(b"\x01" + _rfc9162_root(leaves[:split]) + _rfc9162_root(leaves[split:])).digest()


def test_the_tree_is_rfc_9162s_with_inclusion_and_consistency_proofs():
    leaves = [hashlib.sha256(b"\x00" + bytes([i])).digest() for i in range(21)]
    tree = LeafTree(leaves)
    assert tree.root(0) == hashlib.sha256(b"").digest()
    for size in range(1, 22):
        assert tree.root(size) == _rfc9162_root(leaves[:size]), size
    from pymerkle import MerkleProof, verify_inclusion

    proof = MerkleProof.deserialize(json.loads(json.dumps(tree.inclusion_proof(6, 13))))
    verify_inclusion(leaves[6], tree.root(13), proof)
    with pytest.raises(Exception, match="does not match"):
        verify_inclusion(leaves[7], tree.root(13), proof)
    assert all(tree.consistency_holds(a, b) for a in range(1, 22) for b in range(a, 22))


def test_a_tree_head_signature_covers_size_root_and_time():
    key = Ed25519PrivateKey.generate()
    head = {"size": 3, "root_hash": "ab" * 32, "timestamp": 1700000000000}
    head["signature"] = sign_tree_head(key, **head)
    assert tree_head_signature_valid(key.public_key(), head)
    for changed in ({"size": 2}, {"root_hash": "cd" * 32}, {"timestamp": 1}):
        assert not tree_head_signature_valid(key.public_key(), {**head, **changed})
    assert not tree_head_signature_valid(Ed25519PrivateKey.generate().public_key(), head)
    # What is signed names the log, so that a signature made for another log's head does not fit this one.
    assert (
        tree_head_message(**{k: head[k] for k in ("size", "root_hash", "timestamp")})
        == (f'{{"log":"{LOG_ID}","root_hash":"{"ab" * 32}","size":3,"timestamp":1700000000000}}').encode()
    )


# Sealing ------------------------------------------------------------------------------------------


def test_records_are_plain_inserts_sealed_once_each_in_order(db, alice):
    first = audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"n": 1})
    second = audit_record(event=AuditEvent.CONFIRMED, actor=alice, result={"n": 2})
    assert AuditRecord.objects.filter(pk__in=[first.pk, second.pk]).count() == 2  # written at once
    assert not AuditLeaf.objects.exists() and not AuditTreeHead.objects.exists()

    assert audit_seal() == 2
    assert audit_seal() == 0  # nothing new: no new head either
    leaves = list(AuditLeaf.objects.order_by("index"))
    assert [(leaf.index, leaf.record_id) for leaf in leaves] == [(0, first.pk), (1, second.pk)]
    assert leaves[0].leaf_hash == leaf_hash(record_content(AuditRecord.objects.get(pk=first.pk))).hex()
    head = AuditTreeHead.objects.get()
    assert head.size == 2 and head.root_hash == LeafTree(bytes.fromhex(x.leaf_hash) for x in leaves).root().hex()
    assert tree_head_signature_valid(public_key(), head.as_checkpoint())
    assert head.public_key == public_key_text_of_settings()

    third = audit_record(event=AuditEvent.EXECUTED, actor=alice)
    assert audit_seal() == 1
    assert AuditLeaf.objects.get(record=third).index == 2
    assert list(AuditTreeHead.objects.values_list("size", flat=True)) == [2, 3]
    code, output = _verify()
    assert code == 0 and "3 records sealed under 2 signed tree heads" in output, output


def public_key_text_of_settings():
    from django.conf import settings

    from approvals.audit.log import private_key_from

    return public_key_text(private_key_from(settings.AUDIT_SIGNING_KEY))


def test_a_record_rolled_back_with_its_transaction_is_never_sealed_and_leaves_no_gap(db, alice):
    kept = audit_record(event=AuditEvent.PROPOSED, actor=alice)
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"rolled": "back"})
        raise RuntimeError
    after = audit_record(event=AuditEvent.PROPOSED, actor=alice)
    audit_seal()
    assert list(AuditLeaf.objects.order_by("index").values_list("index", "record_id")) == [(0, kept.pk), (1, after.pk)]
    assert _verify()[0] == 0


def test_a_large_backlog_is_sealed_in_batches_each_record_once(db, alice):
    records = [audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"n": n}) for n in range(23)]
    assert audit_seal(batch_size=5) == 23
    assert list(AuditTreeHead.objects.values_list("size", flat=True)) == [5, 10, 15, 20, 23]
    assert [leaf.record_id for leaf in AuditLeaf.objects.order_by("index")] == [r.pk for r in records]
    assert _verify()[0] == 0


def test_values_the_encoding_cannot_represent_exactly_are_refused_when_recorded(db, alice):
    from approvals.audit.log import AuditEncodingError

    with pytest.raises(AuditEncodingError):
        audit_record(event=AuditEvent.PROPOSED, actor=alice, result={"too_big": 2**60})
    assert not AuditRecord.objects.exists()


def test_json_facts_are_hashed_as_stored(db, alice):
    record = audit_record(
        event="proposed",
        actor=alice,
        result={"b": 2, "a": [1, "x"], "when": None},
        approval_basis={"nested": {"k": 10**15}},
    )
    audit_seal()
    assert _verify()[0] == 0
    assert AuditRecord.objects.get(pk=record.pk).result == {"a": [1, "x"], "b": 2, "when": None}


def test_without_a_signing_key_nothing_is_sealed(db, alice, settings, caplog):
    settings.AUDIT_SIGNING_KEY = ""
    audit_record(event=AuditEvent.PROPOSED, actor=alice)
    assert audit_seal() == 0 and not AuditLeaf.objects.exists()
    assert "AUDIT_SIGNING_KEY is not set" in caplog.text
    with pytest.raises(Exception, match="AUDIT_SIGNING_KEY"):
        call_command("seal_audit")


# Publishing checkpoints ---------------------------------------------------------------------------


def test_each_tree_head_is_appended_to_the_checkpoint_file(
    db, alice, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.AUDIT_CHECKPOINT_FILE = str(tmp_path / "heads.jsonl")
    with django_capture_on_commit_callbacks(execute=True):
        audit_record(event=AuditEvent.PROPOSED, actor=alice)
        audit_seal()
    with django_capture_on_commit_callbacks(execute=True):
        audit_record(event=AuditEvent.CONFIRMED, actor=alice)
        audit_record(event=AuditEvent.EXECUTED, actor=alice)
        audit_seal()
    lines = [json.loads(line) for line in (tmp_path / "heads.jsonl").read_text().splitlines()]
    assert [line["size"] for line in lines] == [1, 3]
    assert lines == [head.as_checkpoint() for head in AuditTreeHead.objects.all()]
    assert all(tree_head_signature_valid(public_key(), line) for line in lines)
    assert [line["note"].split("\n")[:2] for line in lines] == [
        [settings.AUDIT_LOG_ORIGIN, "1"],
        [settings.AUDIT_LOG_ORIGIN, "3"],
    ]
    code, output = _verify()  # AUDIT_CHECKPOINT_FILE is read by default
    assert code == 0 and "2 published checkpoints match" in output, output


def test_each_tree_head_is_delivered_as_a_standard_webhook(
    db, alice, settings, monkeypatch, django_capture_on_commit_callbacks
):
    from standardwebhooks.webhooks import Webhook

    secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    settings.AUDIT_CHECKPOINT_WEBHOOKS = ["https://witness.example.test/heads"]
    settings.AUDIT_CHECKPOINT_WEBHOOK_SECRET = secret
    sent = []

    class Answer:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            return b""

    def urlopen(request, timeout):
        sent.append(request)
        return Answer()

    monkeypatch.setattr("urllib.request.urlopen", urlopen)
    with django_capture_on_commit_callbacks(execute=True):
        audit_record(event=AuditEvent.PROPOSED, actor=alice)
        audit_seal()

    (request,) = sent
    assert request.full_url == "https://witness.example.test/heads"
    headers = {name.lower(): value for name, value in request.header_items()}
    payload = Webhook(secret).verify(request.data.decode(), headers)
    assert payload == {"type": "audit.tree_head", "data": AuditTreeHead.objects.get().as_checkpoint()}
    assert payload["data"]["note"] == AuditTreeHead.objects.get().note and payload["data"]["note"].startswith(
        f"{settings.AUDIT_LOG_ORIGIN}\n1\n"
    )
    with pytest.raises(Exception):  # noqa: B017 - the library's own verification error
        Webhook("whsec_" + base64.b64encode(os.urandom(24)).decode()).verify(request.data.decode(), headers)


# verify_audit finds tampering ---------------------------------------------------------------------


def test_an_intact_log_verifies(some_history):
    code, output = _verify()
    assert code == 0 and f"{len(some_history)} records sealed under 2 signed tree heads" in output, output


def test_an_edited_record_is_reported_with_its_index(some_history):
    target = some_history[2]
    with tampering():
        AuditRecord.objects.filter(pk=target.pk).update(raw_arguments='{"order_id":"o-12","amount_minor":1}')
    code, output = _verify()
    assert code == 1
    assert f"first bad index {target.leaf.index}" in output
    assert f"record {target.pk} (leaf {target.leaf.index}) was changed after it was sealed" in output


def test_a_rewrite_recomputed_forward_without_the_key_is_reported(some_history):
    """The attacker rewrites a record, recomputes its leaf, every root after it, and signs the heads again
    with a key of their own: the heads are no longer signed by the audit key."""
    target = some_history[2]
    forger = Ed25519PrivateKey.generate()
    with tampering():
        AuditRecord.objects.filter(pk=target.pk).update(result={"status": "declined"})
        rewritten = AuditRecord.objects.get(pk=target.pk)
        AuditLeaf.objects.filter(pk=target.leaf.index).update(leaf_hash=leaf_hash(record_content(rewritten)).hex())
        _tiles_rebuilt()
        leaves = [bytes.fromhex(h) for h in AuditLeaf.objects.order_by("index").values_list("leaf_hash", flat=True)]
        for head in AuditTreeHead.objects.filter(size__gt=target.leaf.index):
            root = LeafTree(leaves).root(head.size).hex()
            AuditTreeHead.objects.filter(pk=head.size).update(
                root_hash=root,
                signature=sign_tree_head(forger, size=head.size, root_hash=root, timestamp=head.timestamp),
            )
    code, output = _verify()
    untouched = AuditTreeHead.objects.filter(size__lte=target.leaf.index).order_by("-size").first()
    assert untouched is not None  # the fixture's first head lies before the rewritten record
    assert code == 1 and "is not signed by the audit key" in output, output
    assert f"(first bad index {untouched.size})" in output and untouched.size <= target.leaf.index


def test_a_recomputed_leaf_is_reported_by_its_tile(some_history):
    target = some_history[1]
    with tampering():
        AuditRecord.objects.filter(pk=target.pk).update(result={"status": "declined"})
        rewritten = AuditRecord.objects.get(pk=target.pk)
        AuditLeaf.objects.filter(pk=target.leaf.index).update(leaf_hash=leaf_hash(record_content(rewritten)).hex())
    code, output = _verify()
    assert code == 1 and "leaf 1 does not match its hash in tile 0/0" in output, output
    assert "(first bad index 1)" in output


def test_a_recomputed_leaf_and_tiles_under_the_old_heads_are_reported(some_history):
    target = some_history[1]
    with tampering():
        AuditRecord.objects.filter(pk=target.pk).update(result={"status": "declined"})
        rewritten = AuditRecord.objects.get(pk=target.pk)
        AuditLeaf.objects.filter(pk=target.leaf.index).update(leaf_hash=leaf_hash(record_content(rewritten)).hex())
        _tiles_rebuilt()
    code, output = _verify()
    assert code == 1 and "does not match the leaves" in output and "(first bad index 0)" in output, output


def test_a_changed_tile_is_reported(some_history):
    with tampering():
        tile = AuditTile.objects.get(level=0, index=0)
        changed = bytearray(tile.hashes)
        changed[40] ^= 1
        AuditTile.objects.filter(pk=tile.pk).update(hashes=bytes(changed))
    code, output = _verify()
    assert code == 1 and "leaf 1 does not match its hash in tile 0/0" in output, output


def test_verify_audit_goes_on_from_the_last_checkpoint_found_intact(some_history, alice_agent):
    assert _verify()[0] == 0
    assert AuditVerification.objects.get().size == len(some_history)
    propose(alice_agent, order_id="o-12", amount_minor=300, reason="damaged")
    seal_all()
    code, output = _verify()
    assert code == 0 and f"records from leaf {len(some_history)} on were read" in output, output
    latest = AuditTreeHead.objects.order_by("-size").first()
    assert AuditVerification.objects.order_by("-size").first().size == latest.size
    # An edit below the verified size is not read again incrementally; --full reads it.
    target = some_history[0]
    with tampering():
        AuditRecord.objects.filter(pk=target.pk).update(result={"status": "declined"})
    assert _verify()[0] == 0
    code, output = _verify("--full")
    assert code == 1 and f"record {target.pk} (leaf 0) was changed after it was sealed" in output, output
    # Tiles changed below it are found without --full: they no longer give the verified root.
    with tampering():
        tile = AuditTile.objects.get(level=0, index=0)
        AuditTile.objects.filter(pk=tile.pk).update(hashes=bytes(32) + bytes(tile.hashes)[32:])
    code, output = _verify()
    assert code == 1 and "no longer give the root verified" in output, output


def test_a_deleted_record_in_the_middle_is_reported(some_history):
    target = some_history[1]
    with tampering():
        AuditLeaf.objects.filter(pk=target.leaf.index).delete()
        AuditRecord.objects.filter(pk=target.pk).delete()
    code, output = _verify()
    assert code == 1 and "leaf 1 is missing" in output and "(first bad index 1)" in output, output


def test_a_deleted_record_whose_leaf_stays_is_reported(some_history):
    target = some_history[1]
    with tampering():
        _delete_record(target.pk)
    code, output = _verify()
    assert code == 1 and f"record {target.pk} of leaf 1 is missing" in output, output
    with tampering():  # the test's own end checks the leaf's deferred foreign key
        AuditLeaf.objects.filter(pk=1).delete()


def test_a_removed_tail_is_reported_by_the_tree_heads(some_history):
    last = some_history[-1]
    with tampering():
        AuditLeaf.objects.filter(pk=last.leaf.index).delete()
        AuditRecord.objects.filter(pk=last.pk).delete()
    code, output = _verify()
    assert code == 1 and f"leaves from {last.leaf.index} on are missing" in output, output
    assert f"(first bad index {last.leaf.index})" in output


def test_tree_heads_rolled_back_over_leaves_still_there_are_reported(some_history):
    with tampering():
        AuditTreeHead.objects.filter(size=len(some_history)).delete()
    kept = AuditTreeHead.objects.get().size
    code, output = _verify()
    assert code == 1 and f"leaves from {kept} on have no signed tree head" in output, output
    assert f"(first bad index {kept})" in output


def test_a_tail_deleted_with_its_tree_heads_is_found_by_the_published_checkpoints(some_history, tmp_path):
    checkpoints = _checkpoints_file(tmp_path)
    first_head = AuditTreeHead.objects.order_by("size").first().size
    with tampering():  # records, leaves and heads after the first head: as if they never were
        AuditTreeHead.objects.filter(size__gt=first_head).delete()
        tail = AuditLeaf.objects.filter(index__gte=first_head)
        records = list(tail.values_list("record_id", flat=True))
        tail.delete()
        AuditRecord.objects.filter(pk__in=records).delete()
        _tiles_rebuilt()
    assert AuditRecord.objects.filter(event=AuditEvent.PROPOSAL_REFUSED).count() == 0  # the refusal is gone

    assert _verify()[0] == 0  # what the database alone can say: it is consistent with itself
    code, output = _verify("--checkpoints", checkpoints)
    assert code == 1 and "the database is behind the checkpoint on line 2" in output, output
    assert f"(first bad index {first_head})" in output


def test_a_forged_tree_head_without_the_key_is_reported(some_history):
    size = len(some_history)
    with tampering():
        AuditTreeHead.objects.filter(size=size).update(signature=base64.b64encode(os.urandom(64)).decode())
    code, output = _verify()
    assert code == 1 and f"tree head of size {size} is not signed by the audit key" in output, output
    previous = AuditTreeHead.objects.order_by("size").first().size
    assert f"(first bad index {previous})" in output


def test_a_checkpoint_not_signed_by_the_key_is_reported(some_history, tmp_path):
    path = tmp_path / "forged.jsonl"
    head = AuditTreeHead.objects.order_by("-size").first().as_checkpoint()
    path.write_text(json.dumps({**head, "signature": base64.b64encode(os.urandom(64)).decode()}) + "\n")
    code, output = _verify("--checkpoints", str(path))
    assert code == 1 and "checkpoint on line 1 is not signed" in output


def test_verify_audit_checks_with_a_public_key_given(some_history, tmp_path):
    code, output = _verify("--public-key", public_key_text_of_settings())
    assert code == 0, output
    other = public_key_text(Ed25519PrivateKey.generate())
    code, output = _verify("--public-key", other)
    assert code == 1 and "not signed by the audit key" in output


# The database refuses what it can -------------------------------------------------------------------


@pytest.mark.postgres  # committed rows: in a test's own transaction TRUNCATE is refused for its pending FK checks
def test_postgres_refuses_update_delete_and_truncate_of_the_audit_tables(transactional_db, some_history):
    target = some_history[0]
    for attempt in (
        lambda: AuditRecord.objects.filter(pk=target.pk).update(result={"forged": True}),
        lambda: _delete_record(target.pk),
        lambda: AuditLeaf.objects.filter(pk=0).update(leaf_hash="0" * 64),
        lambda: AuditLeaf.objects.filter(pk=0).delete(),
        lambda: AuditTreeHead.objects.all().update(root_hash="0" * 64),
        lambda: AuditTreeHead.objects.all().delete(),
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            attempt()
    tile = AuditTile.objects.get(level=0, index=0)
    for attempt in (
        lambda: AuditTile.objects.filter(pk=tile.pk).update(hashes=bytes(32) + bytes(tile.hashes)[32:]),
        lambda: AuditTile.objects.filter(pk=tile.pk).update(hashes=bytes(tile.hashes)[:-32]),
        lambda: AuditTile.objects.filter(pk=tile.pk).delete(),
    ):
        with pytest.raises(DatabaseError, match="only grows at its right edge"), transaction.atomic():
            attempt()
    AuditTile.objects.filter(pk=tile.pk).update(hashes=bytes(tile.hashes) + bytes(32))  # growing is allowed
    for table in ("approvals_auditrecord", "approvals_auditleaf", "approvals_audittreehead", "approvals_audittile"):
        with pytest.raises(DatabaseError, match="append-only: TRUNCATE refused"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(f"TRUNCATE {table} CASCADE")
    assert AuditRecord.objects.get(pk=target.pk).result == target.result
    code, output = _verify()
    grown = len(some_history)
    assert code == 1 and f"leaves from {grown} on are missing (the tiles hold {grown + 1})" in output, output


@pytest.mark.postgres
def test_a_truncate_with_the_triggers_off_is_found_by_the_published_checkpoints(
    transactional_db, some_history, tmp_path
):
    checkpoints = _checkpoints_file(tmp_path)
    with tampering(), connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE approvals_auditcosignature, approvals_audittreehead, approvals_auditleaf, approvals_auditrecord, "
            "approvals_audittile"
        )
    code, output = _verify("--checkpoints", checkpoints)
    assert code == 1 and "the database is behind the checkpoint on line 1" in output, output
    assert "(first bad index 0)" in output


@pytest.mark.postgres
def test_postgres_refuses_to_change_what_a_preview_proposes(some_history):
    preview = Preview.objects.get()
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        Preview.objects.filter(pk=preview.pk).update(amount_minor=999)
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        Preview.objects.filter(pk=preview.pk).update(payload={**preview.payload, "currency": "USD"})
    Preview.objects.filter(pk=preview.pk).update(status="declined")  # its status may move on
    assert Preview.objects.get(pk=preview.pk).amount_minor == 500
    assert connection.vendor == "postgresql"


def test_a_malformed_signing_key_fails_the_system_check_without_showing_it(settings):
    from approvals.audit.checks import audit_signing_key_check

    assert audit_signing_key_check(None) == []
    settings.AUDIT_SIGNING_KEY = "c2VjcmV0LWJ1dC10b28tc2hvcnQ="
    (error,) = audit_signing_key_check(None)
    assert error.id == "approvals.E001" and "32 bytes" in error.msg
    assert settings.AUDIT_SIGNING_KEY not in error.msg and "c2VjcmV0" not in error.msg
