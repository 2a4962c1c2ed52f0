"""The audit tree's hash tiles (c2sp.org/tlog-tiles), stored in the database by the sealer.

A tile row holds up to 256 hashes; only the right edge of each level grows, so a partial tile `.p/<W>`
is the first W hashes of its row, and a full tile never changes again. Proofs and roots read O(log n)
tiles (approvals.audit.tlog.TreeHashes): no process holds the tree in memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from approvals.audit import tlog
from approvals.audit.log import record_content
from approvals.core.digests import canonical_bytes
from approvals.models import AuditLeaf, AuditTile

FULL_TILE_BYTES = tlog.TILE_WIDTH * tlog.HASH_SIZE


class TilesBroken(Exception):
    """The stored tiles do not continue where the tree of the given size ends."""


def _read_tile(level: int, index: int) -> bytes:
    hashes = AuditTile.objects.filter(level=level, index=index).values_list("hashes", flat=True).first()
    return bytes(hashes) if hashes is not None else b""


def stored_tree(size: int) -> tlog.TreeHashes:
    """The tree of the first `size` leaves, as its stored tiles give it."""
    return tlog.TreeHashes(_read_tile, size)


def tiles_extend(old_size: int, leaf_hashes: Sequence[bytes]) -> None:
    """Append leaves `old_size`, `old_size + 1`, ... to the stored tiles: each level's right-edge tile grows,
    and every tile that fills up adds its root to the level above. The sealer calls it, under its lock."""
    count, new, level = old_size, list(leaf_hashes), 0
    while new:
        first = count // tlog.TILE_WIDTH
        existing = _read_tile(level, first)
        if len(existing) != (count % tlog.TILE_WIDTH) * tlog.HASH_SIZE:
            raise TilesBroken(
                f"tile {level}/{first} holds {len(existing) // tlog.HASH_SIZE} hashes where the tree of "
                f"{old_size} leaves needs {count % tlog.TILE_WIDTH}"
            )
        grown = existing + b"".join(new)
        parents: list[bytes] = []
        rows = []
        for offset in range(0, len(grown), FULL_TILE_BYTES):
            chunk = grown[offset : offset + FULL_TILE_BYTES]
            rows.append(AuditTile(level=level, index=first + offset // FULL_TILE_BYTES, hashes=chunk))
            if len(chunk) == FULL_TILE_BYTES:
                parents.append(
                    tlog.subtree_root([chunk[i : i + tlog.HASH_SIZE] for i in range(0, len(chunk), tlog.HASH_SIZE)])
                )
        if existing:
            AuditTile.objects.filter(level=level, index=first).update(hashes=rows[0].hashes)
            rows = rows[1:]
        AuditTile.objects.bulk_create(rows)
        count //= tlog.TILE_WIDTH
        new, level = parents, level + 1


def tile_bytes(level: int, index: int, width: int, size: int) -> bytes | None:
    """Tile `level/index` of `width` hashes as served for a tree of `size` leaves; None for a tile the tree
    does not have."""
    full, partial = tlog.tile_widths(size, level)
    if index > full or (index == full and width > partial):
        return None  # a partial tile of a full one is its prefix: served for clients of older checkpoints
    stored = _read_tile(level, index)
    wanted = width * tlog.HASH_SIZE
    return stored[:wanted] if len(stored) >= wanted else None


def entry_bundle_bytes(index: int, width: int, size: int) -> bytes | None:
    """Entry bundle `index` (`width` entries) for a tree of `size` leaves: each leaf's record in its
    canonical bytes (the leaf being SHA-256(0x00 || entry)), uint16 length-prefixed."""
    if tile_bytes(0, index, width, size) is None:
        return None
    start = index * tlog.TILE_WIDTH
    leaves = (
        AuditLeaf.objects.filter(index__gte=start, index__lt=start + width).select_related("record").order_by("index")
    )
    entries = [canonical_bytes(record_content(leaf.record)) for leaf in leaves]
    if len(entries) != width:
        return None
    return tlog.entry_bundle(entries)
