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

import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, Max, OuterRef, Q

from approvals.audit.log import (
    EMPTY_ROOT,
    RECEIPT_FORMAT,
    LeafTree,
    leaf_hash,
    now_ms,
    private_key_from,
    public_key_text,
    record_content,
    sign_tree_head,
    tree_head_signature_valid,
)
from approvals.models import AuditLeaf, AuditRecord, AuditTreeHead, Preview
from approvals.operations.publish import DELIVER_AUDIT_CHECKPOINT, task_publish

logger = logging.getLogger(__name__)

SEAL_BATCH_SIZE = 5000
# pg_try_advisory_xact_lock's key for "the sealer" (any fixed 64-bit number, the same in every process).
SEAL_LOCK_KEY = 0x6175646974_5EA1


class AuditTreeBroken(Exception):
    """The leaves in the database do not add up to the latest signed tree head: nothing is sealed on
    top of them (`manage.py verify_audit` says where)."""


# Keys ---------------------------------------------------------------------------------------------


@cache
def _private_key(text: str) -> Ed25519PrivateKey:
    return private_key_from(text)


def signing_key() -> Ed25519PrivateKey | None:
    """The Ed25519 key from AUDIT_SIGNING_KEY, or None when it is not set."""
    text = settings.AUDIT_SIGNING_KEY
    return _private_key(text) if text else None


def public_key() -> Ed25519PublicKey | None:
    """The public half of AUDIT_SIGNING_KEY, the key tree heads are checked against by default."""
    key = signing_key()
    return key.public_key() if key else None


# The tree, kept between seals ------------------------------------------------------------------

_tree_lock = threading.RLock()
_tree = LeafTree()


def _forget_tree() -> None:
    global _tree
    _tree = LeafTree()


def _tree_at(head: AuditTreeHead | None) -> LeafTree:
    """This process's copy of the tree, holding exactly the leaves the latest head signs. Leaves are read
    once and kept (pymerkle keeps the roots of large subtrees with them, so a new root or a proof costs
    a few hashes); a copy that does not match the head is read again from the start. Hold _tree_lock."""
    size = head.size if head else 0
    for _attempt in range(2):
        if _tree.size > size:
            _forget_tree()
        if _tree.size < size:
            _tree.extend(_leaf_hashes(_tree.size, size))
        if _tree.root(size).hex() == (head.root_hash if head else EMPTY_ROOT.hex()):
            return _tree
        _forget_tree()
    raise AuditTreeBroken(f"the leaves do not match the latest tree head (size {size})")


def _leaf_hashes(start: int, stop: int) -> Iterator[bytes]:
    expected = start
    leaves = AuditLeaf.objects.filter(index__gte=start, index__lt=stop).order_by("index")
    for index, digest in leaves.values_list("index", "leaf_hash").iterator(chunk_size=10000):
        if index != expected:
            raise AuditTreeBroken(f"leaf {expected} is missing")
        expected += 1
        yield bytes.fromhex(digest)
    if expected != stop:
        raise AuditTreeBroken(f"leaf {expected} is missing")


def latest_head() -> AuditTreeHead | None:
    return AuditTreeHead.objects.order_by("-size").first()


# Sealing -----------------------------------------------------------------------------------------


def audit_seal(*, batch_size: int = SEAL_BATCH_SIZE) -> int:
    """Seal every record that can be sealed now, a batch per transaction; returns how many were sealed.
    Without AUDIT_SIGNING_KEY nothing is sealed (and an error is logged)."""
    key = signing_key()
    if key is None:
        logger.error("AUDIT_SIGNING_KEY is not set: audit records are not sealed")
        return 0
    total = 0
    while True:
        sealed = _seal_batch(key, batch_size)
        total += sealed
        if sealed < batch_size:
            return total


def _seal_batch(key: Ed25519PrivateKey, batch_size: int) -> int:
    with _tree_lock:
        try:
            with transaction.atomic():
                return _seal_batch_locked(key, batch_size)
        except IntegrityError:
            # Another sealer took these leaf indexes first (SQLite has no advisory lock): its turn.
            _forget_tree()
            return 0
        except BaseException:
            _forget_tree()  # the copy may hold leaves of the seal that was just rolled back
            raise


def _seal_batch_locked(key: Ed25519PrivateKey, batch_size: int) -> int:
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
    tree = _tree_at(head)
    leaves = [
        AuditLeaf(index=size + offset, record_id=record.pk, leaf_hash=leaf_hash(record_content(record)).hex())
        for offset, record in enumerate(records)
    ]
    AuditLeaf.objects.bulk_create(leaves)
    tree.extend(bytes.fromhex(leaf.leaf_hash) for leaf in leaves)
    new_size = size + len(leaves)
    root = tree.root(new_size).hex()
    timestamp = max(now_ms(), head.timestamp if head else 0)
    new_head = AuditTreeHead.objects.create(
        size=new_size,
        root_hash=root,
        timestamp=timestamp,
        signature=sign_tree_head(key, size=new_size, root_hash=root, timestamp=timestamp),
        public_key=public_key_text(key),
        horizon=max(horizon, head.horizon if head else 0),
    )
    checkpoint = new_head.as_checkpoint()
    transaction.on_commit(lambda: checkpoint_publish(checkpoint))
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


def seal_lag_seconds() -> float:
    """How long the oldest record not yet sealed has waited (0 when every record is sealed)."""
    head = latest_head()
    unsealed = AuditRecord.objects.filter(~Exists(AuditLeaf.objects.filter(record_id=OuterRef("pk"))))
    if head is not None and connection.vendor == "postgresql":
        unsealed = unsealed.filter(transaction_id__gte=head.horizon)
    oldest = unsealed.order_by("created_at").values_list("created_at", flat=True).first()
    if oldest is None:
        return 0.0
    from django.utils import timezone

    return max(0.0, (timezone.now() - oldest).total_seconds())


# Publishing checkpoints --------------------------------------------------------------------------


def checkpoint_publish(checkpoint: dict[str, Any]) -> None:
    """Publish a signed tree head outside the database: a line appended to AUDIT_CHECKPOINT_FILE, and a
    Standard Webhooks delivery to each of AUDIT_CHECKPOINT_WEBHOOKS. A failure is logged; the next head
    is published all the same (each head is consistent with every earlier one)."""
    path = settings.AUDIT_CHECKPOINT_FILE
    if path:
        line = json.dumps(checkpoint, sort_keys=True, separators=(",", ":")) + "\n"
        try:
            with open(path, "a", encoding="utf-8") as file:
                file.write(line)
                file.flush()
                os.fsync(file.fileno())
        except OSError:
            logger.exception("Could not append the audit tree head of size %s to %s", checkpoint["size"], path)
    if settings.AUDIT_CHECKPOINT_WEBHOOKS:
        for url in settings.AUDIT_CHECKPOINT_WEBHOOKS:
            try:
                task_publish(DELIVER_AUDIT_CHECKPOINT, url, checkpoint)
            except Exception:  # noqa: BLE001 - a broker that is down; the next head is published again
                logger.warning("Could not queue the audit checkpoint for %s", url, exc_info=True)


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
    """The preview's audit records with their inclusion proofs against the latest signed tree head.
    Records not sealed yet are counted (`unsealed_records`); ask again a second later for them."""
    records = list(AuditRecord.objects.filter(preview=preview).select_related("leaf").order_by("id"))
    with _tree_lock:
        head = latest_head()
        entries = []
        if head is not None:
            tree = _tree_at(head)
            for record in records:
                leaf = record.leaf if _has_leaf(record) else None
                if leaf is None or leaf.index >= head.size:
                    continue
                entries.append(
                    {
                        "leaf_index": leaf.index,
                        "record": record_content(record),
                        "inclusion_proof": tree.inclusion_proof(leaf.index, head.size),
                    }
                )
    return {
        "format": RECEIPT_FORMAT,
        "preview": str(preview.pk),
        "tree_head": head.as_checkpoint() if head else None,
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
    *, public_key: Ed25519PublicKey | None, checkpoints: Iterable[tuple[int, dict[str, Any]]] = ()
) -> AuditSummary:
    """Check the audit log; stops at the first inconsistency (`summary.problem`):
    every record against its leaf hash, the leaves against every stored tree head (signature, root,
    consistency with the head before), then the published checkpoints against the database."""
    summary = AuditSummary()
    tree = LeafTree()
    problem = _check_leaves(tree)
    summary.leaves = tree.size
    if problem is None:
        problem = _check_heads(tree, public_key, summary)
    if problem is None:
        problem = _check_checkpoints(tree, public_key, checkpoints, summary)
    summary.problem = problem
    summary.unsealed = AuditRecord.objects.filter(~Exists(AuditLeaf.objects.filter(record_id=OuterRef("pk")))).count()
    return summary


def _check_leaves(tree: LeafTree) -> AuditProblem | None:
    expected = 0
    chunk: list[tuple[int, int, str]] = []
    leaves = AuditLeaf.objects.order_by("index").values_list("index", "record_id", "leaf_hash")

    def check(rows: list[tuple[int, int, str]]) -> AuditProblem | None:
        nonlocal expected
        records = AuditRecord.objects.in_bulk([record_id for _index, record_id, _digest in rows])
        for index, record_id, digest in rows:
            if index != expected:
                return AuditProblem(f"leaf {expected} is missing (the next leaf is {index})", expected)
            record = records.get(record_id)
            if record is None:
                return AuditProblem(f"record {record_id} of leaf {index} is missing", index)
            if leaf_hash(record_content(record)).hex() != digest:
                return AuditProblem(f"record {record_id} (leaf {index}) was changed after it was sealed", index)
            tree.extend([bytes.fromhex(digest)])
            expected += 1
        return None

    for row in leaves.iterator(chunk_size=2000):
        chunk.append(row)
        if len(chunk) == 2000:
            problem = check(chunk)
            if problem:
                return problem
            chunk = []
    return check(chunk) if chunk else None


def _check_heads(tree: LeafTree, key: Ed25519PublicKey | None, summary: AuditSummary) -> AuditProblem | None:
    previous: AuditTreeHead | None = None
    for head in AuditTreeHead.objects.order_by("size").iterator(chunk_size=2000):
        summary.heads += 1
        trusted_from = previous.size if previous else 0
        if key is None:
            return AuditProblem(NO_KEY.format(what="the tree heads"))
        if not tree_head_signature_valid(key, head.as_checkpoint()):
            return AuditProblem(
                f"tree head of size {head.size} is not signed by the audit key: leaves {trusted_from} to "
                f"{head.size - 1} can't be trusted",
                trusted_from,
            )
        if head.size > tree.size:
            return AuditProblem(
                f"tree head of size {head.size} was signed, but the tree has {tree.size} leaves: "
                f"leaves from {tree.size} on are missing",
                tree.size,
            )
        if tree.root(head.size).hex() != head.root_hash:
            return AuditProblem(
                f"tree head of size {head.size} does not match the leaves: a leaf from {trusted_from} to "
                f"{head.size - 1} was changed",
                trusted_from,
            )
        if previous is not None:
            if head.timestamp < previous.timestamp:
                return AuditProblem(f"tree head of size {head.size} is older than the head before it", trusted_from)
            if not tree.consistency_holds(previous.size, head.size):
                return AuditProblem(
                    f"tree heads of sizes {previous.size} and {head.size} are not consistent", trusted_from
                )
        previous = head
    latest = previous.size if previous else 0
    if tree.size > latest:
        return AuditProblem(
            f"leaves from {latest} on have no signed tree head (the latest has size {latest}): tree heads were removed",
            latest,
        )
    return None


def _check_checkpoints(
    tree: LeafTree,
    key: Ed25519PublicKey | None,
    checkpoints: Iterable[tuple[int, dict[str, Any]]],
    summary: AuditSummary,
) -> AuditProblem | None:
    for line, checkpoint in checkpoints:
        summary.checkpoints += 1
        if key is None:
            return AuditProblem(NO_KEY.format(what="the checkpoints"))
        if not tree_head_signature_valid(key, checkpoint):
            return AuditProblem(f"checkpoint on line {line} is not signed by the audit key")
        size = int(checkpoint["size"])
        if size > tree.size:
            return AuditProblem(
                f"the database is behind the checkpoint on line {line}: it published {size} leaves, the "
                f"database has {tree.size}: leaves from {tree.size} on were removed",
                tree.size,
            )
        if tree.root(size).hex() != checkpoint["root_hash"]:
            return AuditProblem(
                f"the checkpoint on line {line} (size {size}) does not match the database: a leaf below {size} "
                "was changed and its tree heads signed again",
                None,
            )
    return None
