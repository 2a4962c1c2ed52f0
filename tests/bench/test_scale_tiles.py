"""`make bench-scale` writes the audit tree's tiles directly (bench/scale_tiles.py) instead of sealing
millions of records: those tiles must be exactly the sealer's, and what the sealer then seals on top of
them must give receipts that verify and a log that `verify_audit` finds intact."""

import pytest
from django.db import transaction

from approvals.audit import tlog
from approvals.audit.log import now_ms, receipt_check
from approvals.audit.seal import audit_verify, preview_receipt, public_key
from approvals.audit.tiles import stored_tree, tiles_extend
from approvals.models import AuditLeaf, AuditRecord, AuditTile, AuditTreeHead, Preview
from bench.scale_tiles import TileBuilder, random_leaf_chunks, tile_root, tiles_of, tiles_write, tree_head_sign
from tests.conftest import propose, seal_all


def _stored_tiles() -> list[tuple[int, int, bytes]]:
    return sorted(
        (level, index, bytes(hashes))
        for level, index, hashes in AuditTile.objects.values_list("level", "index", "hashes")
    )


def _sealers_tiles(leaves: bytes, batches: list[int]) -> list[tuple[int, int, bytes]]:
    """The tiles tiles_extend stores for these leaves, sealed in batches of the given sizes (rolled back)."""
    hashes = [leaves[i : i + 32] for i in range(0, len(leaves), 32)]
    with transaction.atomic():
        done = 0
        for count in batches:
            tiles_extend(done, hashes[done : done + count])
            done += count
        assert done == len(hashes)
        stored = _stored_tiles()
        transaction.set_rollback(True)
    return stored


def test_a_tiles_root_is_the_subtree_root_of_its_hashes():
    tile = bytes(range(256)) * 32
    assert tile_root(tile) == tlog.subtree_root([tile[i : i + 32] for i in range(0, len(tile), 32)])


def test_chunks_of_any_length_give_the_same_tiles():
    leaves = b"".join(random_leaf_chunks(700, seed=5))
    whole = list(tiles_of([leaves]))
    ragged = TileBuilder()
    rows = []
    for start, end in ((0, 1), (1, 300), (300, 301), (301, 700)):
        rows += ragged.add(leaves[start * 32 : end * 32])
    assert rows + ragged.finish() == whole
    assert [(row.level, row.index, len(row.hashes) // 32) for row in whole] == [
        (0, 0, 256),
        (0, 1, 256),
        (0, 2, 188),
        (1, 0, 2),
    ]
    with pytest.raises(ValueError, match="32 bytes"):
        TileBuilder().add(b"\x00" * 33)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("size", "batches"),
    [
        # 273 full leaf tiles and one of 112: a full tile at level 1, a partial one at level 2.
        (70_000, [5000] * 13 + [3000, 1, 999, 1000]),
        (1_000, [256, 1, 743]),
    ],
)
def test_the_generated_tiles_are_the_sealers_and_a_receipt_sealed_on_top_verifies(size, batches, alice_agent, o12):
    leaves = b"".join(random_leaf_chunks(size, seed=size))
    expected = _sealers_tiles(leaves, batches)
    assert not AuditTile.objects.exists()

    assert tiles_write(tiles_of(random_leaf_chunks(size, seed=size, chunk_leaves=4000)), batch=100) == len(expected)
    assert _stored_tiles() == expected
    assert stored_tree(size).inclusion_proof(size - 1, size)  # the right edge is readable
    head = tree_head_sign(size, timestamp=now_ms())
    assert AuditTreeHead.objects.get().root_hash == head.root_hash == _root_of(leaves).hex()

    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    seal_all()
    records = AuditRecord.objects.count()
    assert AuditLeaf.objects.order_by("index").first().index == size  # sealed on top of the generated leaves
    assert AuditTreeHead.objects.order_by("-size").first().size == size + records

    receipt = preview_receipt(preview)
    check = receipt_check(receipt, public_key())
    assert check.valid and check.records == 1, check.problems
    assert receipt["records"][0]["leaf_index"] >= size
    forged = {**receipt, "tree_head": {**receipt["tree_head"], "size": size}}
    assert not receipt_check(forged, public_key()).valid

    summary = audit_verify(public_key=public_key())
    assert summary.problem is None, summary.problem
    assert summary.leaves == size + records and summary.heads == 2  # the generated head and the sealer's


def _root_of(leaves: bytes) -> bytes:
    """RFC 6962's root computed from the leaves alone, not from any tile."""
    nodes = [leaves[i : i + 32] for i in range(0, len(leaves), 32)]

    def root(lo: int, hi: int) -> bytes:
        if hi - lo == 1:
            return nodes[lo]
        split = 1 << ((hi - lo - 1).bit_length() - 1)
        return tlog.node_hash(root(lo, lo + split), root(lo + split, hi))

    return root(0, len(nodes))
