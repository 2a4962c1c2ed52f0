"""The audit log's tree written directly as its stored c2sp.org/tlog-tiles, for `make bench-scale`.

Sealing ten million records through the sealer would take hours; what a receipt, the sealer and
`verify_audit` read of the tree is its tiles (approvals.audit.tiles), so the benchmark writes the tiles of
N leaf hashes straight into `approvals_audittile` (COPY on PostgreSQL), the upper levels computed here as
the sealer's `tiles_extend` computes them, and signs a tree head of size N as the sealer signs one. Real
records are then sealed on top by `audit_seal()`. The generated leaves have no records: they stand for
records verified before (an AuditVerification at size N), so `verify_audit` goes on from there and
`verify_audit --full` would report leaf 0 missing.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.db import connection, transaction

from approvals.audit import tlog
from approvals.audit.log import public_key_text, sign_tree_head
from approvals.audit.seal import audit_origin, signing_keys
from approvals.audit.tiles import stored_tree
from approvals.models import AuditTile, AuditTreeHead, AuditVerification

FULL_TILE = tlog.TILE_WIDTH * tlog.HASH_SIZE


@dataclass(frozen=True)
class TileRow:
    level: int
    index: int
    hashes: bytes


def tile_root(tile: bytes) -> bytes:
    """The root of a full tile's 256 hashes (tlog.subtree_root, with less per-hash overhead: it runs
    40,000 times for ten million leaves)."""
    sha256 = hashlib.sha256
    nodes = [tile[i : i + tlog.HASH_SIZE] for i in range(0, len(tile), tlog.HASH_SIZE)]
    while len(nodes) > 1:
        nodes = [sha256(b"\x01" + nodes[i] + nodes[i + 1]).digest() for i in range(0, len(nodes), 2)]
    return nodes[0]


class TileBuilder:
    """The tiles of a tree whose leaf hashes arrive in chunks, level by level as the sealer stores them:
    `add` returns the full tiles a chunk completes (each full tile's root goes to the level above),
    `finish` the partial tile at the right edge of each level."""

    def __init__(self) -> None:
        self._filling: list[bytearray] = []  # per level, the hashes of the tile not yet full
        self._full: list[int] = []  # per level, how many full tiles so far
        self.size = 0

    def add(self, leaf_hashes: bytes) -> list[TileRow]:
        if len(leaf_hashes) % tlog.HASH_SIZE:
            raise ValueError("leaf hashes come 32 bytes each")
        self.size += len(leaf_hashes) // tlog.HASH_SIZE
        rows: list[TileRow] = []
        self._push(0, leaf_hashes, rows)
        return rows

    def _push(self, level: int, data: bytes, rows: list[TileRow]) -> None:
        if level == len(self._filling):
            self._filling.append(bytearray())
            self._full.append(0)
        filling, offset, parents = self._filling[level], 0, []
        if filling:
            offset = min(FULL_TILE - len(filling), len(data))
            filling += data[:offset]
            if len(filling) < FULL_TILE:
                return
            parents.append(self._emit(level, bytes(filling), rows))
            filling.clear()
        while len(data) - offset >= FULL_TILE:
            parents.append(self._emit(level, data[offset : offset + FULL_TILE], rows))
            offset += FULL_TILE
        filling += data[offset:]
        if parents:
            self._push(level + 1, b"".join(parents), rows)

    def _emit(self, level: int, tile: bytes, rows: list[TileRow]) -> bytes:
        rows.append(TileRow(level, self._full[level], tile))
        self._full[level] += 1
        return tile_root(tile)

    def finish(self) -> list[TileRow]:
        return [
            TileRow(level, self._full[level], bytes(filling)) for level, filling in enumerate(self._filling) if filling
        ]


def tiles_of(leaf_chunks: Iterable[bytes]) -> Iterator[TileRow]:
    """Every tile of the tree of these leaf hashes (the chunks concatenated), exactly as
    `tiles_extend(0, leaves)` stores them, in any number of seals."""
    builder = TileBuilder()
    for chunk in leaf_chunks:
        yield from builder.add(chunk)
    yield from builder.finish()


def random_leaf_chunks(size: int, *, seed: int, chunk_leaves: int = 1 << 16) -> Iterator[bytes]:
    """`size` random 32-byte leaf hashes, `chunk_leaves` at a time; the same seed gives the same leaves."""
    rng = random.Random(seed)
    done = 0
    while done < size:
        count = min(chunk_leaves, size - done)
        yield rng.randbytes(count * tlog.HASH_SIZE)
        done += count


def tiles_write(rows: Iterable[TileRow], *, batch: int = 4096) -> int:
    """Store tile rows, `batch` to a transaction: COPY on PostgreSQL, bulk_create elsewhere. Returns how
    many were written."""
    written, pending = 0, []
    for row in rows:
        pending.append(row)
        if len(pending) >= batch:
            written += _write_batch(pending)
            pending = []
    if pending:
        written += _write_batch(pending)
    return written


def _write_batch(rows: list[TileRow]) -> int:
    with transaction.atomic():
        if connection.vendor == "postgresql":
            table = connection.ops.quote_name(AuditTile._meta.db_table)
            with connection.cursor() as cursor:
                with cursor.copy(f'COPY {table} ("level", "index", "hashes") FROM STDIN (FORMAT BINARY)') as copy:
                    copy.set_types(["int2", "int8", "bytea"])
                    for row in rows:
                        copy.write_row((row.level, row.index, row.hashes))
        else:
            AuditTile.objects.bulk_create([AuditTile(level=r.level, index=r.index, hashes=r.hashes) for r in rows])
    return len(rows)


def tree_head_sign(size: int, *, timestamp: int) -> AuditTreeHead:
    """A signed tree head of the stored tiles' first `size` leaves, made as the sealer makes one (JSON
    signature and checkpoint note, with AUDIT_SIGNING_KEY's keys), and the verification mark that lets
    `verify_audit` go on from it."""
    keys = signing_keys()
    if not keys:
        raise RuntimeError("AUDIT_SIGNING_KEY is not set: no tree head can be signed")
    root = stored_tree(size).root()
    head = AuditTreeHead.objects.create(
        size=size,
        root_hash=root.hex(),
        timestamp=timestamp,
        signature=sign_tree_head(keys[0], size=size, root_hash=root.hex(), timestamp=timestamp),
        public_key=public_key_text(keys[0]),
        note=tlog.checkpoint_sign(tlog.Checkpoint(audit_origin(), size, root), keys).serialize(),
    )
    AuditVerification.objects.create(size=size, root_hash=head.root_hash)
    return head
