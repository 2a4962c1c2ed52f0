"""The sealer: adds committed audit records to the Merkle tree and signs its heads; receipts; checks.

Which records may be sealed, and in which order
-----------------------------------------------
Records are plain inserts in their own transactions, so they commit in any order and a record with a
lower id may commit after one with a higher id. Sealing by id would then either skip the late one or
put it in the tree twice. On PostgreSQL each record carries the id of the transaction that inserted
it (`transaction_id`, from `pg_current_xact_id()`, 64 bits, never reused). The sealer computes a
horizon H from its snapshot: the oldest transaction id still running (`pg_snapshot_xip`), or the
snapshot's `xmax` when none is. Every transaction below H has ended, and so every record with
`transaction_id < H` that will ever exist is committed and visible now. Each seal takes the records
with `previous horizon <= transaction_id < H` that have no leaf, in `(transaction_id, id)` order,
and stores H with its tree head: each record falls in exactly one seal, late commits included (a
transaction still running has an id >= H and is sealed by a later seal). The one exception, for a
caller that seals inside its own transaction (the tests do), is that transaction's own records:
they are visible to it and are sealed with it or rolled back with it.

H is a cluster-wide value: one long transaction anywhere on the server (an idle session in a
transaction, a long report) holds sealing back until it ends. `docs/audit.md` says what to watch.

On SQLite, which has one writer at a time, records commit in id order: the next seal takes the
records after the highest sealed id.

Only one sealer adds leaves at a time: it holds a transaction-level advisory lock on PostgreSQL (a
second sealer skips its turn), and the leaf indexes and tree sizes are primary keys everywhere.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, Max, OuterRef, Q

from approvals.audit import tlog
from approvals.audit.log import (
    EMPTY_ROOT,
    RECEIPT_FORMAT,
    leaf_hash,
    now_ms,
    private_key_from,
    public_key_from,
    public_key_text,
    record_content,
    sign_tree_head,
    tree_head_signature_valid,
)
from approvals.audit.tiles import stored_tree, tiles_extend
from approvals.audit.witnesses import witness_quorum, witnesses_configured
from approvals.core.digests import canonical_bytes
from approvals.core.outbox import outbox_handler, outbox_write
from approvals.models import (
    AuditCosignature,
    AuditLeaf,
    AuditRecord,
    AuditTreeHead,
    AuditVerification,
    OutboxMessage,
    Preview,
)

logger = logging.getLogger(__name__)

SEAL_BATCH_SIZE = 5000
# pg_try_advisory_xact_lock's key for "the sealer" (any fixed 64-bit number, the same in every process).
SEAL_LOCK_KEY = 0x6175646974_5EA1


class AuditTreeBroken(Exception):
    """The leaves in the database do not add up to the latest signed tree head: nothing is sealed on
    top of them (`manage.py verify_audit` says where)."""


# Keys ---------------------------------------------------------------------------------------------


@cache
def _private_keys(text: str) -> tuple[Ed25519PrivateKey, ...]:
    return tuple(private_key_from(part) for part in text.split(",") if part.strip())


def signing_keys() -> list[Ed25519PrivateKey]:
    """The Ed25519 keys of AUDIT_SIGNING_KEY: one, or two during a key rotation (the new one first).
    Every checkpoint is signed by each of them."""
    text = settings.AUDIT_SIGNING_KEY
    return list(_private_keys(text)) if text else []


def signing_key() -> Ed25519PrivateKey | None:
    """The key tree heads' own (JSON) signatures are made with: the first of AUDIT_SIGNING_KEY's."""
    keys = signing_keys()
    return keys[0] if keys else None


def public_key() -> Ed25519PublicKey | None:
    """The public half of signing_key(), the key tree heads are checked against by default."""
    key = signing_key()
    return key.public_key() if key else None


def audit_origin() -> str:
    return settings.AUDIT_LOG_ORIGIN


def log_verifier_keys() -> list[tlog.VerifierKey]:
    """The note verifier keys of the log (name = origin): the signing keys' and the retired ones'."""
    publics = [key.public_key() for key in signing_keys()]
    publics += [public_key_from(text) for text in settings.AUDIT_SIGNING_KEYS_RETIRED if text.strip()]
    keys: list[tlog.VerifierKey] = []
    for public in publics:
        vkey = tlog.verifier_key(audit_origin(), public)
        if vkey not in keys:
            keys.append(vkey)
    return keys


def latest_head() -> AuditTreeHead | None:
    return AuditTreeHead.objects.order_by("-size").first()


def latest_published_head() -> AuditTreeHead | None:
    """The latest tree head the log stands by in public: with witnesses configured, the latest one that
    AUDIT_WITNESS_QUORUM of them cosigned; without, the latest. The cosignatures are read newest head
    first (the head's index, backwards) and the read stops at the first head with its quorum."""
    witnesses = [witness.vkey for witness in witnesses_configured()]
    if not witnesses:
        return None if settings.AUDIT_WITNESSES else latest_head()  # all malformed: nothing counts
    cosigned = (
        AuditCosignature.objects.filter(witness__in=witnesses)
        .values("head_id")
        .annotate(cosigners=Count("id"))
        .filter(cosigners__gte=witness_quorum())
        .order_by("-head_id")
        .values_list("head_id", flat=True)
        .first()
    )
    return AuditTreeHead.objects.filter(size=cosigned).first() if cosigned is not None else None


def checkpoint_note(head: AuditTreeHead) -> str:
    """The head's checkpoint note with the witnesses' cosignature lines after the log's signatures."""
    lines = "".join(line if line.endswith("\n") else line + "\n" for line in _cosignature_lines(head))
    return head.note + lines


def _cosignature_lines(head: AuditTreeHead) -> list[str]:
    return list(head.cosignatures.order_by("witness").values_list("line", flat=True))


def inclusion_proof(index: int, size: int) -> list[bytes]:
    return stored_tree(size).inclusion_proof(index, size)


def consistency_proof(old_size: int, new_size: int) -> list[bytes]:
    return stored_tree(new_size).consistency_proof(old_size, new_size)


# Sealing -----------------------------------------------------------------------------------------


def audit_seal(*, batch_size: int = SEAL_BATCH_SIZE) -> int:
    """Seal every record that can be sealed now, a batch per transaction; returns how many were sealed.
    Without AUDIT_SIGNING_KEY nothing is sealed (and an error is logged)."""
    keys = signing_keys()
    if not keys:
        logger.error("AUDIT_SIGNING_KEY is not set: audit records are not sealed")
        return 0
    total = 0
    while True:
        sealed = _seal_batch(keys, batch_size)
        total += sealed
        if sealed < batch_size:
            return total


def _seal_batch(keys: list[Ed25519PrivateKey], batch_size: int) -> int:
    try:
        with transaction.atomic():
            return _seal_batch_locked(keys, batch_size)
    except IntegrityError:
        # Another sealer took these leaf indexes first (SQLite has no advisory lock): its turn.
        return 0


def _seal_batch_locked(keys: list[Ed25519PrivateKey], batch_size: int) -> int:
    postgres = connection.vendor == "postgresql"
    if postgres:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [SEAL_LOCK_KEY])
            if not cursor.fetchone()[0]:
                return 0  # another sealer is at work
    head = latest_head()
    size = head.size if head else 0
    candidates = AuditRecord.objects.all()
    if postgres:
        horizon, own = _transaction_horizon()
        below = Q(transaction_id__lt=horizon)
        if own is not None:
            below |= Q(transaction_id=own)
        candidates = (
            candidates.filter(below, transaction_id__gte=head.horizon if head else 0)
            .filter(~Exists(AuditLeaf.objects.filter(record_id=OuterRef("pk"))))
            .order_by("transaction_id", "id")
        )
    else:
        horizon, own = 0, None
        last = AuditLeaf.objects.aggregate(last=Max("record_id"))["last"] or 0
        candidates = candidates.filter(pk__gt=last).order_by("id")
    records = list(candidates[:batch_size])
    if not records:
        return 0
    if postgres:
        if len(records) == batch_size:
            horizon = records[-1].transaction_id  # the rest, from this transaction on, go in the next batch
        if own is not None:
            horizon = min(horizon, own)  # this transaction may still add records: later seals look again
    tree = stored_tree(size)
    if tree.root().hex() != (head.root_hash if head else EMPTY_ROOT.hex()):
        raise AuditTreeBroken(f"the stored tiles do not match the latest tree head (size {size})")
    leaves = [
        AuditLeaf(index=size + offset, record_id=record.pk, leaf_hash=leaf_hash(record_content(record)).hex())
        for offset, record in enumerate(records)
    ]
    AuditLeaf.objects.bulk_create(leaves)
    tiles_extend(size, [bytes.fromhex(leaf.leaf_hash) for leaf in leaves])
    new_size = size + len(leaves)
    root = tree.grown(new_size).root()
    timestamp = max(now_ms(), head.timestamp if head else 0)
    new_head = AuditTreeHead.objects.create(
        size=new_size,
        root_hash=root.hex(),
        timestamp=timestamp,
        signature=sign_tree_head(keys[0], size=new_size, root_hash=root.hex(), timestamp=timestamp),
        public_key=public_key_text(keys[0]),
        note=tlog.checkpoint_sign(tlog.Checkpoint(audit_origin(), new_size, root), keys).serialize(),
        horizon=max(horizon, head.horizon if head else 0),
    )
    checkpoint_sealed(new_head)
    return len(records)


def _transaction_horizon() -> tuple[int, int | None]:
    """The oldest transaction id still running (else the next one to be given out), leaving out this
    transaction's own; and this transaction's id, if it has one."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE((SELECT min(x::text::bigint) FROM pg_snapshot_xip(pg_current_snapshot()) AS x),"
            " pg_snapshot_xmax(pg_current_snapshot())::text::bigint),"
            " pg_current_xact_id_if_assigned()::text::bigint"
        )
        horizon, own = cursor.fetchone()
    return horizon, own


def _unsealed_records() -> Any:
    """Records with no leaf yet: on PostgreSQL only those at or above the latest head's horizon can be
    (every record below it was sealed), so the read does not grow with the log."""
    head = latest_head()
    unsealed = AuditRecord.objects.filter(~Exists(AuditLeaf.objects.filter(record_id=OuterRef("pk"))))
    if head is not None and connection.vendor == "postgresql":
        unsealed = unsealed.filter(transaction_id__gte=head.horizon)
    return unsealed


def seal_lag_seconds() -> float:
    """How long the oldest record not yet sealed has waited (0 when every record is sealed)."""
    unsealed = _unsealed_records()
    oldest = unsealed.order_by("created_at").values_list("created_at", flat=True).first()
    if oldest is None:
        return 0.0
    from django.utils import timezone

    return max(0.0, (timezone.now() - oldest).total_seconds())


# Publishing checkpoints --------------------------------------------------------------------------


# The outbox's kinds for a tree head: to have cosigned (approvals.audit.cosigning handles it), to publish
# (the file, then one message per checkpoint webhook), and one checkpoint webhook's delivery.
CHECKPOINT_COSIGN_KIND = "audit_checkpoint_cosign"
CHECKPOINT_PUBLISH_KIND = "audit_checkpoint_publish"
CHECKPOINT_WEBHOOK_KIND = "audit_checkpoint_webhook"
CHECKPOINT_FILE_TAIL_BYTES = 64 * 1024


def checkpoint_sealed(head: AuditTreeHead) -> None:
    """In the seal's transaction: the new tree head is owed to the witnesses (when there are any) or, without
    them, to the public at once (approvals.core.outbox; a sealer or broker that dies loses neither)."""
    if settings.AUDIT_WITNESSES:
        outbox_write(CHECKPOINT_COSIGN_KIND, {"size": head.size}, message_id=f"audit-cosign-{head.size}")
    else:
        checkpoint_publication_owed(head)


def checkpoint_publication_owed(head: AuditTreeHead) -> None:
    """In the current transaction: the tree head is owed to AUDIT_CHECKPOINT_FILE and the checkpoint
    webhooks (once per head, however many times this is asked)."""
    if settings.AUDIT_CHECKPOINT_FILE or settings.AUDIT_CHECKPOINT_WEBHOOKS:
        outbox_write(CHECKPOINT_PUBLISH_KIND, {"size": head.size}, message_id=f"audit-publish-{head.size}")


def published_checkpoint(head: AuditTreeHead) -> dict[str, Any]:
    """A tree head as published (file, webhooks): its signed fields and its note with the cosignatures."""
    return {**head.as_checkpoint(), "note": checkpoint_note(head)}


@outbox_handler(CHECKPOINT_PUBLISH_KIND, queue="deliveries")
def checkpoint_publish_owed(message: OutboxMessage) -> None:
    """Publish a signed tree head outside the database: a line appended to AUDIT_CHECKPOINT_FILE (not
    twice: a head the file's last line already covers is not appended), and one outbox message per
    AUDIT_CHECKPOINT_WEBHOOKS URL. Raises when the file cannot be written (tried again)."""
    head = AuditTreeHead.objects.get(size=int(message.payload["size"]))
    checkpoint = published_checkpoint(head)
    path = settings.AUDIT_CHECKPOINT_FILE
    if path and _checkpoint_file_last_size(path) < head.size:
        line = json.dumps(checkpoint, sort_keys=True, separators=(",", ":")) + "\n"
        with open(path, "a", encoding="utf-8") as file:
            file.write(line)
            file.flush()
            os.fsync(file.fileno())
    with transaction.atomic():
        for index, url in enumerate(settings.AUDIT_CHECKPOINT_WEBHOOKS):
            outbox_write(
                CHECKPOINT_WEBHOOK_KIND,
                {"url": url, "size": head.size},
                message_id=f"audit-tree-head-{head.size}-{index}",
            )


def _checkpoint_file_last_size(path: str) -> int:
    """The size of the last checkpoint in the file (0 without one)."""
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - CHECKPOINT_FILE_TAIL_BYTES))
            tail = file.read()
    except FileNotFoundError:
        return 0
    for line in reversed(tail.splitlines()):
        try:
            return int(json.loads(line)["size"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


@outbox_handler(CHECKPOINT_WEBHOOK_KIND, queue="deliveries")
def checkpoint_webhook_owed(message: OutboxMessage) -> None:
    """POST the tree head to one checkpoint webhook; raises unless it answered 2xx (tried again)."""
    head = AuditTreeHead.objects.get(size=int(message.payload["size"]))
    checkpoint_webhook_send(str(message.payload["url"]), published_checkpoint(head))


def checkpoint_webhook_send(url: str, checkpoint: dict[str, Any]) -> None:
    """One Standard Webhooks POST of a tree head (webhook-id `audit-tree-head-<size>`, the same every
    time); raises urllib's errors (an HTTPError for a non-2xx answer)."""
    import urllib.request

    body, headers = checkpoint_webhook_request(url, checkpoint)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - configured https URLs
        response.read()


def checkpoint_webhook_request(url: str, checkpoint: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a Standard Webhooks message carrying a tree head."""
    from datetime import UTC, datetime

    from standardwebhooks.webhooks import Webhook

    body = json.dumps({"type": "audit.tree_head", "data": checkpoint}, separators=(",", ":"))
    message_id = f"audit-tree-head-{checkpoint['size']}"
    sent_at = datetime.now(UTC)
    signature = Webhook(settings.AUDIT_CHECKPOINT_WEBHOOK_SECRET).sign(message_id, sent_at, body)
    headers = {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": signature,
    }
    return body.encode(), headers


def checkpoints_read(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """The checkpoints of a JSON Lines file, with their line numbers (blank lines skipped)."""
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            if line.strip():
                yield number, json.loads(line)


# Receipts ----------------------------------------------------------------------------------------


def preview_receipt(preview: Preview) -> dict[str, Any]:
    """The preview's audit records, each with its inclusion proof and its c2sp.org/tlog-proof@v1 against
    the latest published tree head. Records not sealed (or not published) yet are counted in
    `unsealed_records`; ask again a second later for them."""
    records = list(AuditRecord.objects.filter(preview=preview).select_related("leaf").order_by("id"))
    head = latest_published_head()
    entries = []
    tree_head = None
    if head is not None:
        note = checkpoint_note(head)
        tree_head = {**head.as_checkpoint(), "note": note}
        tree = stored_tree(head.size)
        for record in records:
            leaf = record.leaf if _has_leaf(record) else None
            if leaf is None or leaf.index >= head.size:
                continue
            content = record_content(record)
            proof = tree.inclusion_proof(leaf.index, head.size)
            entries.append(
                {
                    "leaf_index": leaf.index,
                    "record": content,
                    "inclusion_proof": [base64.b64encode(node).decode() for node in proof],
                    "tlog_proof": tlog.TlogProof(leaf.index, tuple(proof), note, canonical_bytes(content)).text(),
                }
            )
    return {
        "format": RECEIPT_FORMAT,
        "preview": str(preview.pk),
        "tree_head": tree_head,
        "records": entries,
        "unsealed_records": len(records) - len(entries),
    }


def _has_leaf(record: AuditRecord) -> bool:
    try:
        record.leaf  # noqa: B018 - select_related filled it in, or there is none
    except AuditLeaf.DoesNotExist:
        return False
    return True


# Verification ------------------------------------------------------------------------------------


NO_KEY = "no public key to check {what} with: set AUDIT_SIGNING_KEY or give --public-key"


@dataclass(frozen=True)
class AuditProblem:
    message: str
    index: int | None = None  # the first leaf index known to be bad, where it is known


@dataclass
class AuditSummary:
    leaves: int = 0
    heads: int = 0
    checkpoints: int = 0
    unsealed: int = 0
    problem: AuditProblem | None = None
    notes: list[str] = field(default_factory=list)


def audit_verify(
    *,
    public_key: Ed25519PublicKey | None,
    checkpoints: Iterable[tuple[int, dict[str, Any]]] = (),
    full: bool = False,
) -> AuditSummary:
    """Check the audit log; stops at the first inconsistency (`summary.problem`): every record against its
    leaf and the tiles, each tile against the level above, every tree head (its signatures, its root from
    the tiles), then the published checkpoints against the tiles. It starts where the last run that found
    the log intact ended (AuditVerification) unless `full`; the tiles below it are still checked against
    that run's root, but records below it are not read again."""
    summary = AuditSummary()
    start = 0
    if not full:
        last = AuditVerification.objects.order_by("-size", "-verified_at").first()
        if last is not None:
            start = last.size
            summary.notes.append(
                f"records from leaf {start} on were read (the last verified checkpoint); --full reads all"
            )
            reader = _cached_tile_reader()
            if tlog.TreeHashes(reader, start).root().hex() != last.root_hash:
                summary.problem = AuditProblem(
                    f"the tiles no longer give the root verified for size {start}: run verify_audit --full", None
                )
                return summary
    summary.problem = _check_log(start, public_key, checkpoints, summary)
    summary.unsealed = _unsealed_records().count()
    if summary.problem is None:
        head = latest_head()
        if head is not None and (start == 0 or head.size > start):
            AuditVerification.objects.create(size=head.size, root_hash=head.root_hash)
    return summary


def _check_log(
    start: int,
    key: Ed25519PublicKey | None,
    checkpoints: Iterable[tuple[int, dict[str, Any]]],
    summary: AuditSummary,
) -> AuditProblem | None:
    problem = _check_leaves_and_tiles(start, summary)
    if problem is None:
        problem = _check_heads(start, key, summary)
    if problem is None:
        problem = _check_checkpoints(key, checkpoints, summary)
    return problem


def _cached_tile_reader() -> tlog.TileReader:
    """Tiles read once for many roots: heads come in size order, so the few tiles at the edge repeat."""
    from functools import lru_cache

    return lru_cache(maxsize=512)(lambda level, index: _read_stored_tile(level, index))


def _read_stored_tile(level: int, index: int) -> bytes:
    from approvals.models import AuditTile

    hashes = AuditTile.objects.filter(level=level, index=index).values_list("hashes", flat=True).first()
    return bytes(hashes) if hashes is not None else b""


def _check_leaves_and_tiles(start: int, summary: AuditSummary) -> AuditProblem | None:
    """Records against their leaves and the level-0 tiles from `start` on; then each full tile's root
    against its place in the level above, up to the top."""
    width = tlog.TILE_WIDTH
    expected = start
    first_tile = start // width
    leaves = AuditLeaf.objects.filter(index__gte=start).order_by("index").values_list("index", "record_id", "leaf_hash")
    roots: list[bytes] = []  # of the full level-0 tiles from start's on

    def check_tile(number: int, rows: list[tuple[int, int, str]]) -> AuditProblem | None:
        nonlocal expected
        records = AuditRecord.objects.in_bulk([record_id for _index, record_id, _digest in rows])
        tile = _read_stored_tile(0, number)
        for index, record_id, digest in rows:
            if index != expected:
                return AuditProblem(f"leaf {expected} is missing (the next leaf is {index})", expected)
            record = records.get(record_id)
            if record is None:
                return AuditProblem(f"record {record_id} of leaf {index} is missing", index)
            if leaf_hash(record_content(record)).hex() != digest:
                return AuditProblem(f"record {record_id} (leaf {index}) was changed after it was sealed", index)
            at = (index % width) * tlog.HASH_SIZE
            if tile[at : at + tlog.HASH_SIZE].hex() != digest:
                return AuditProblem(f"leaf {index} does not match its hash in tile 0/{number}", index)
            expected += 1
        if len(tile) == width * tlog.HASH_SIZE:
            roots.append(_tile_root(tile))
        return None

    pending: list[tuple[int, int, str]] = []
    for row in leaves.iterator(chunk_size=2048):
        if pending and row[0] // width != pending[0][0] // width:
            problem = check_tile(pending[0][0] // width, pending)
            if problem:
                return problem
            pending = []
        pending.append(row)
    if pending:
        problem = check_tile(pending[0][0] // width, pending)
        if problem:
            return problem
    held = len(_read_stored_tile(0, expected // width)) // tlog.HASH_SIZE
    if held > expected % width:
        return AuditProblem(
            f"leaves from {expected} on are missing (the tiles hold {expected // width * width + held})", expected
        )
    summary.leaves = expected
    return _check_upper_tiles(first_tile, roots, expected)


def _tile_root(tile: bytes) -> bytes:
    return tlog.subtree_root([tile[i : i + tlog.HASH_SIZE] for i in range(0, len(tile), tlog.HASH_SIZE)])


def _check_upper_tiles(first: int, roots: list[bytes], size: int) -> AuditProblem | None:
    """`roots` are the roots of the full tiles `first`, `first + 1`, ... of the level below: each must be the
    hash at its place in this level's tiles, and this level's full tiles go up in turn."""
    width = tlog.TILE_WIDTH
    read = _cached_tile_reader()
    for level in range(1, 64):
        full, partial = tlog.tile_widths(size, level)
        for position, root in enumerate(roots, first):
            number, at = divmod(position, width)
            tile = read(level, number)
            if tile[at * tlog.HASH_SIZE : (at + 1) * tlog.HASH_SIZE] != root:
                return AuditProblem(f"tile {level}/{number} does not match the tiles below it", position * width**level)
        if len(read(level, full)) > partial * tlog.HASH_SIZE:
            return AuditProblem(f"tile {level}/{full} holds more than the tree of {size} leaves needs", size)
        if full == 0:
            return None
        first //= width
        roots = [_tile_root(read(level, number)) for number in range(first, full)]
    return None


def _check_heads(start: int, key: Ed25519PublicKey | None, summary: AuditSummary) -> AuditProblem | None:
    reader = _cached_tile_reader()
    note_keys = _note_keys(key)
    head_keys = _head_keys(key)
    previous: AuditTreeHead | None = AuditTreeHead.objects.filter(size__lt=start).order_by("-size").first()
    for head in AuditTreeHead.objects.filter(size__gte=start).order_by("size").iterator(chunk_size=2000):
        summary.heads += 1
        trusted_from = previous.size if previous else 0
        if key is None:
            return AuditProblem(NO_KEY.format(what="the tree heads"))
        if not _head_signed(head_keys, head.as_checkpoint()):
            return AuditProblem(
                f"tree head of size {head.size} is not signed by the audit key: leaves {trusted_from} to "
                f"{head.size - 1} can't be trusted",
                trusted_from,
            )
        if head.note and not _note_matches(head.note, note_keys, head.size, head.root_hash):
            return AuditProblem(
                f"the checkpoint note of tree head {head.size} is not signed by the audit key or names another tree",
                trusted_from,
            )
        if head.size > summary.leaves:
            return AuditProblem(
                f"tree head of size {head.size} was signed, but the tree has {summary.leaves} leaves: "
                f"leaves from {summary.leaves} on are missing",
                summary.leaves,
            )
        if tlog.TreeHashes(reader, head.size).root().hex() != head.root_hash:
            return AuditProblem(
                f"tree head of size {head.size} does not match the leaves: a leaf from {trusted_from} to "
                f"{head.size - 1} was changed",
                trusted_from,
            )
        if previous is not None and head.timestamp < previous.timestamp:
            return AuditProblem(f"tree head of size {head.size} is older than the head before it", trusted_from)
        previous = head
    latest = previous.size if previous else 0
    if summary.leaves > latest:
        return AuditProblem(
            f"leaves from {latest} on have no signed tree head (the latest has size {latest}): tree heads were removed",
            latest,
        )
    return None


def _note_keys(key: Ed25519PublicKey | None) -> list[tlog.VerifierKey]:
    """The same keys as the heads' own signatures (the key given and the retired ones), as note keys."""
    return [tlog.verifier_key(audit_origin(), public) for public in _head_keys(key)]


def _head_keys(key: Ed25519PublicKey | None) -> list[Ed25519PublicKey]:
    """The keys a tree head's own (JSON) signature is checked with: the key given (by default
    AUDIT_SIGNING_KEY's first) and the retired ones (AUDIT_SIGNING_KEYS_RETIRED), which signed the heads
    made before a key rotation."""
    if key is None:
        return []
    return [key, *(public_key_from(text) for text in settings.AUDIT_SIGNING_KEYS_RETIRED if text.strip())]


def _head_signed(keys: list[Ed25519PublicKey], head: dict[str, Any]) -> bool:
    return any(tree_head_signature_valid(key, head) for key in keys)


def _note_matches(note: str, keys: list[tlog.VerifierKey], size: int, root_hash: str) -> bool:
    try:
        checkpoint = tlog.checkpoint_verify(note, keys, origin=audit_origin()).checkpoint
    except tlog.FormatError:
        return False
    return checkpoint.size == size and checkpoint.root.hex() == root_hash


def _check_checkpoints(
    key: Ed25519PublicKey | None,
    checkpoints: Iterable[tuple[int, dict[str, Any]]],
    summary: AuditSummary,
) -> AuditProblem | None:
    reader = _cached_tile_reader()
    note_keys = _note_keys(key)
    head_keys = _head_keys(key)
    for line, checkpoint in checkpoints:
        summary.checkpoints += 1
        if key is None:
            return AuditProblem(NO_KEY.format(what="the checkpoints"))
        if not _head_signed(head_keys, checkpoint):
            return AuditProblem(f"checkpoint on line {line} is not signed by the audit key")
        size = int(checkpoint["size"])
        if checkpoint.get("note") and not _note_matches(checkpoint["note"], note_keys, size, checkpoint["root_hash"]):
            return AuditProblem(
                f"the checkpoint note on line {line} is not signed by the audit key or names another tree"
            )
        if size > summary.leaves:
            return AuditProblem(
                f"the database is behind the checkpoint on line {line}: it published {size} leaves, the "
                f"database has {summary.leaves}: leaves from {summary.leaves} on were removed",
                summary.leaves,
            )
        if tlog.TreeHashes(reader, size).root().hex() != checkpoint["root_hash"]:
            return AuditProblem(
                f"the checkpoint on line {line} (size {size}) does not match the database: a leaf below {size} "
                "was changed and its tree heads signed again",
                None,
            )
    return None
