"""The audit log's tiles: stored by the sealer as c2sp.org/tlog-tiles lays them out, served under /audit/,
and proofs read from them match an independent tree over the same leaves."""

import hashlib

import pytest
from django.test import override_settings

from approvals.audit import tlog
from approvals.audit.seal import audit_seal, checkpoint_note, consistency_proof, inclusion_proof, latest_head
from approvals.audit.tiles import stored_tree, tiles_extend
from approvals.core.services import audit_record
from approvals.models import AuditEvent, AuditLeaf, AuditTile, AuditTreeHead


def _mth(leaves):
    """RFC 6962's MTH, written out independently of the tiles."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    split = 1
    while split * 2 < len(leaves):
        split *= 2
    return tlog.node_hash(_mth(leaves[:split]), _mth(leaves[split:]))


def _records(count, actor):
    for number in range(count):
        audit_record(event=AuditEvent.AGENT_SESSION_CREATED, actor=actor, result={"n": number})


@pytest.mark.parametrize("batches", [[1], [255, 1], [256], [100, 200, 300], [600, 1, 1]])
def test_tiles_grow_at_the_right_edge_as_the_tree_does(db, batches):
    leaves = []
    for count in batches:
        new = [hashlib.sha256(f"{len(leaves) + i}".encode()).digest() for i in range(count)]
        tiles_extend(len(leaves), new)
        leaves += new
        tree = stored_tree(len(leaves))
        assert tree.root() == _mth(leaves)
        for size in {1, len(leaves) // 2 or 1, len(leaves)}:
            index = size - 1
            proof = tree.inclusion_proof(index, size)
            assert tlog.inclusion_valid(leaves[index], index, size, proof, _mth(leaves[:size]))
            assert tlog.consistency_valid(
                size, len(leaves), _mth(leaves[:size]), _mth(leaves), tree.consistency_proof(size)
            )
    stored = {(t.level, t.index): bytes(t.hashes) for t in AuditTile.objects.all()}
    assert stored == _tiles_laid_out(leaves)


def test_a_tree_computes_each_complete_subtree_once_and_keeps_them_as_it_grows(db, monkeypatch):
    leaves = [hashlib.sha256(f"{i}".encode()).digest() for i in range(70_000)]
    tiles_extend(0, leaves)
    root = _mth(leaves)
    hashed = []
    node_hash = tlog.node_hash
    monkeypatch.setattr(tlog, "node_hash", lambda left, right: hashed.append(1) or node_hash(left, right))
    tree = stored_tree(len(leaves) - 5)
    first = tree.inclusion_proof(len(leaves) - 10)
    once = len(hashed)
    assert tree.inclusion_proof(len(leaves) - 9) and len(hashed) - once < once / 4  # its neighbour's shares most
    assert first == stored_tree(len(leaves) - 5).inclusion_proof(len(leaves) - 10)

    hashed.clear()
    grown = tree.grown(len(leaves))
    assert grown.root() == root
    kept = len(hashed)
    hashed.clear()
    assert stored_tree(len(leaves)).root() == root
    assert kept < len(hashed) / 4  # the grown tree reused the subtrees it already had
    index = len(leaves) - 1
    assert tlog.inclusion_valid(leaves[index], index, len(leaves), grown.inclusion_proof(index), root)
    with pytest.raises(ValueError):
        grown.grown(10)


def _tiles_laid_out(leaves):
    """tlog-tiles' layout computed from scratch: level 0 the leaves, each level above the roots of the
    full tiles below, 256 hashes a tile, the last one partial."""
    tiles, hashes, level = {}, list(leaves), 0
    while hashes:
        for start in range(0, len(hashes), 256):
            tiles[(level, start // 256)] = b"".join(hashes[start : start + 256])
        hashes = [_mth(hashes[start : start + 256]) for start in range(0, len(hashes) - 255, 256)]
        level += 1
    return tiles


def test_tiles_that_do_not_continue_the_tree_are_refused(db):
    tiles_extend(0, [bytes(32)] * 3)
    from approvals.audit.tiles import TilesBroken

    with pytest.raises(TilesBroken, match="holds 3 hashes where the tree of 5 leaves needs 5"):
        tiles_extend(5, [bytes(32)])


def test_each_seal_signs_a_checkpoint_note_with_the_origin_as_key_name(db, alice, settings):
    _records(3, alice)
    audit_seal()
    head = latest_head()
    origin = settings.AUDIT_LOG_ORIGIN
    assert origin == "127.0.0.1:8000/audit"
    assert head.note.startswith(f"{origin}\n3\n")
    from approvals.audit.seal import log_verifier_keys

    verified = tlog.checkpoint_verify(head.note, log_verifier_keys(), origin=origin)
    assert verified.checkpoint.size == 3 and verified.checkpoint.root.hex() == head.root_hash
    leaves = [bytes.fromhex(h) for h in AuditLeaf.objects.order_by("index").values_list("leaf_hash", flat=True)]
    assert verified.checkpoint.root == _mth(leaves)
    assert checkpoint_note(head) == head.note  # no witness configured, no cosignature


def test_proofs_from_the_stored_tiles_hold_between_seals(db, alice):
    _records(300, alice)
    audit_seal()
    _records(20, alice)
    audit_seal()
    old, new = AuditTreeHead.objects.order_by("size")
    assert (old.size, new.size) == (300, 320)
    proof = consistency_proof(old.size, new.size)
    assert tlog.consistency_valid(300, 320, bytes.fromhex(old.root_hash), bytes.fromhex(new.root_hash), proof)
    leaf = bytes.fromhex(AuditLeaf.objects.get(index=299).leaf_hash)
    assert tlog.inclusion_valid(leaf, 299, 320, inclusion_proof(299, 320), bytes.fromhex(new.root_hash))
    assert not tlog.inclusion_valid(leaf, 298, 320, inclusion_proof(298, 320), bytes.fromhex(new.root_hash))


@pytest.fixture
def sealed_300(db, alice):
    _records(300, alice)
    audit_seal()
    return latest_head()


def test_the_checkpoint_is_served_as_plain_text_for_a_few_seconds(client, sealed_300):
    response = client.get("/audit/checkpoint")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Cache-Control"] == "public, max-age=2"
    assert response.content.decode() == sealed_300.note


def test_no_checkpoint_before_the_first_seal(client, db):
    assert client.get("/audit/checkpoint").status_code == 404


def test_hash_tiles_are_public_immutable_and_laid_out_as_tlog_tiles_says(client, sealed_300):
    leaves = [bytes.fromhex(h) for h in AuditLeaf.objects.order_by("index").values_list("leaf_hash", flat=True)]
    full = client.get("/audit/tile/0/000")
    assert full.status_code == 200 and full["Content-Type"] == "application/octet-stream"
    assert full["Cache-Control"] == "public, max-age=31536000, immutable"
    assert full.content == b"".join(leaves[:256])
    partial = client.get("/audit/tile/0/001.p/44")
    assert partial.status_code == 200 and partial.content == b"".join(leaves[256:300])
    assert client.get("/audit/tile/0/001.p/10").content == b"".join(leaves[256:266])  # an older checkpoint's
    top = client.get("/audit/tile/1/000.p/1")
    assert top.status_code == 200 and top.content == tlog.subtree_root(leaves[:256])
    for missing in (
        "/audit/tile/0/001",  # not full yet
        "/audit/tile/0/001.p/45",  # wider than the tree
        "/audit/tile/0/002.p/1",
        "/audit/tile/1/000",
        "/audit/tile/2/000.p/1",
        "/audit/tile/0/x000/001",  # a leading zero group
        "/audit/tile/64/000",
        "/audit/tile/0/000.p/256",
        "/audit/tile/0/000.p/0",
        "/audit/tile/0/1",
    ):
        assert client.get(missing).status_code == 404, missing


@override_settings(AUDIT_READ_TOKEN="read-me-please")
def test_entry_bundles_need_the_read_token(client, sealed_300):
    from approvals.audit.log import record_content
    from approvals.core.digests import canonical_bytes

    refused = client.get("/audit/tile/entries/000")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    assert b"AUDIT_READ_TOKEN" in refused.content and b'"n"' not in refused.content
    assert client.get("/audit/tile/entries/000", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    response = client.get("/audit/tile/entries/001.p/44", HTTP_AUTHORIZATION="Bearer read-me-please")
    assert response.status_code == 200 and response["Cache-Control"].startswith("private")
    entries = tlog.entry_bundle_parse(response.content)
    leaves = AuditLeaf.objects.filter(index__gte=256).select_related("record").order_by("index")
    assert entries == [canonical_bytes(record_content(leaf.record)) for leaf in leaves]
    tile = client.get("/audit/tile/0/001.p/44").content
    assert [tlog.entry_leaf_hash(e) for e in entries] == [tile[i : i + 32] for i in range(0, len(tile), 32)]
    assert client.get("/audit/tile/entries/002.p/1", HTTP_AUTHORIZATION="Bearer read-me-please").status_code == 404


def test_without_a_read_token_configured_entry_bundles_are_refused_to_everyone(client, sealed_300, settings):
    settings.AUDIT_READ_TOKEN = ""
    assert client.get("/audit/tile/entries/000", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_audit_public_key_prints_the_verifier_key_in_note_form(db, settings):
    from io import StringIO

    from django.core.management import call_command

    from approvals.audit.seal import public_key

    out = StringIO()
    call_command("audit_public_key", "--note", stdout=out)
    vkey = tlog.verifier_key_parse(out.getvalue().strip())
    assert vkey.name == settings.AUDIT_LOG_ORIGIN and vkey.signature_type == tlog.SIGNATURE_ED25519
    assert vkey.ed25519.public_bytes_raw() == public_key().public_bytes_raw()
    assert out.getvalue().strip() == vkey.text()
