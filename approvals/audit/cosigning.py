"""The witnesses' cosignatures of the log's checkpoints: collected after each seal, kept, counted, and a
tree head published once AUDIT_WITNESS_QUORUM configured witnesses cosigned it (approvals.audit.witnesses
is the protocol; this is the log's side of it, with the database).

Which head is sent: always the latest. A witness cosigns the largest tree it has seen consistent with
what it saw before, so the cosignature of the latest head covers every head sealed before it (while a
witness was down, say); older heads need not all be cosigned, and those that never get a quorum are
never published. Until the latest head has its quorum, `seal.latest_published_head()` (receipts,
`GET /audit/checkpoint`) is the last head that had one, and records sealed after it wait.

What each witness made of the last checkpoint sent to it is kept (AuditWitnessAnswer): a refused
checkpoint (400, 403, 404, 422, or a 409 this log can't follow) is not sent to it again, a later head
is; a witness that did not answer (time-out, connection, 429, 5xx) is asked again by the task's retries
and then by the beat. `witnesses_report()` is what /readyz and /metrics show of it.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from approvals.audit import seal
from approvals.audit.witnesses import (
    REFUSALS,
    Outcome,
    Submission,
    Witness,
    checkpoint_submit,
    witness_quorum,
    witness_settings_problems,
    witnesses_configured,
)
from approvals.core.outbox import outbox_handler
from approvals.models import AuditCosignature, AuditTreeHead, AuditWitnessAnswer, OutboxMessage
from approvals.operations import metrics

logger = logging.getLogger(__name__)

RETRY_BACKOFF_MAX_SECONDS = 300
# One task sends the newest head again when another was sealed while it was asking: at most this often.
COLLECT_ROUNDS = 3
# A claim outlives the deadline by this much: a worker that dies while asking frees its witnesses.
CLAIM_MARGIN_SECONDS = 5


@outbox_handler(seal.CHECKPOINT_COSIGN_KIND, queue="deliveries")
def cosignatures_owed(message: OutboxMessage) -> None:
    """The outbox's message for a sealed head: one round of asking the witnesses. One that did not answer
    is asked again by the beat's `cosign-audit-checkpoint` (the latest head, every minute)."""
    cosignatures_collect(int(message.payload["size"]))


def cosignatures_collect(size: int | None = None) -> list[Submission]:
    """Send the latest tree head (at least `size`, the one whose seal asked) to each configured witness
    that has not cosigned it and may be asked now (`_askable`); keep what they answer. While a newer
    head was sealed meanwhile, once more, up to COLLECT_ROUNDS. Returns what each witness asked made of
    it: the task retries while one is UNREACHABLE."""
    submissions: list[Submission] = []
    for _round in range(COLLECT_ROUNDS):
        head = seal.latest_head()
        if head is None or (size is not None and head.size < size):
            if head is not None:
                logger.error("Tree head %s was to be cosigned, but the latest head is %s", size, head.size)
            break
        done = _collect_for(head)
        submissions += done
        if not any(submission.outcome == Outcome.COSIGNED for submission in done):
            break
        newest = seal.latest_head()
        if newest is None or newest.size == head.size:
            break
    return submissions


def _collect_for(head: AuditTreeHead) -> list[Submission]:
    witnesses = witnesses_configured()
    if not witnesses:
        return []
    if not head.note:
        logger.warning("Tree head %s has no checkpoint note: it can't be sent to witnesses", head.size)
        return []
    cosigned = set(AuditCosignature.objects.filter(head=head).values_list("witness", flat=True))
    answers = {answer.witness: answer for answer in AuditWitnessAnswer.objects.filter(witness__in=_vkeys(witnesses))}
    now = timezone.now()
    deadline = float(settings.AUDIT_WITNESS_DEADLINE_SECONDS)
    asked: list[tuple[Witness, int]] = []
    for witness in witnesses:
        if witness.vkey in cosigned or not _askable(answers.get(witness.vkey), head, now):
            continue
        if _claim(witness, now, now + timedelta(seconds=deadline + CLAIM_MARGIN_SECONDS)):
            asked.append((witness, witness_cosigned_size(witness.vkey)))
    if not asked:
        return []
    head_size = head.size
    kept = 0
    try:
        submissions = checkpoint_submit(
            head.note,
            asked,
            log_keys=seal.log_verifier_keys(),
            consistency_proof=lambda old: seal.consistency_proof(old, head_size),
            known_size=lambda named: AuditTreeHead.objects.filter(size=named).exists(),
            deadline_seconds=deadline,
        )
        for submission in submissions:
            _answer_keep(head, submission)
            kept += 1
    finally:
        # Whatever went wrong before an answer was kept, the witnesses asked are free for the next task.
        for witness, _old in asked[kept:]:
            AuditWitnessAnswer.objects.filter(witness=witness.vkey).update(asking_until=None)
    return submissions


def _askable(last: AuditWitnessAnswer | None, head: AuditTreeHead, now: datetime) -> bool:
    """Whether a witness may be sent `head` now: never if it refused this same checkpoint (the protocol
    says not to send a refused request again); not within AUDIT_WITNESS_RETRY_SECONDS of a refusal or of
    a try it did not answer, so that a witness that is down costs a `deliveries` worker one deadline
    now and then, not one per seal."""
    if last is None or not last.outcome:
        return True
    refused = last.outcome in REFUSALS
    if refused and last.size == head.size:
        return False
    if refused or last.outcome == Outcome.UNREACHABLE:
        return now - last.answered_at >= timedelta(seconds=float(settings.AUDIT_WITNESS_RETRY_SECONDS))
    return True


def _claim(witness: Witness, now: datetime, until: datetime) -> bool:
    """Take the witness for this task until `until`: tasks for heads sealed close together then do not
    all wait on the same slow witness at once, nor race each other into its 409s."""
    AuditWitnessAnswer.objects.get_or_create(witness=witness.vkey, defaults={"size": 0, "old_size": 0})
    free = Q(asking_until__isnull=True) | Q(asking_until__lte=now)
    return AuditWitnessAnswer.objects.filter(free, witness=witness.vkey).update(asking_until=until) == 1


def _vkeys(witnesses: list[Witness]) -> list[str]:
    return [witness.vkey for witness in witnesses]


def witness_cosigned_size(vkey: str) -> int:
    """The largest tree head this witness cosigned (0 if none): the `old` size it expects."""
    return AuditCosignature.objects.filter(witness=vkey).aggregate(size=Max("head_id"))["size"] or 0


def _answer_keep(head: AuditTreeHead, submission: Submission) -> None:
    witness = submission.witness
    AuditWitnessAnswer.objects.update_or_create(
        witness=witness.vkey,
        defaults={
            "outcome": submission.outcome.value,
            "size": submission.size,
            "old_size": submission.old_size,
            "http_status": submission.http_status,
            "witness_size": submission.witness_size,
            "detail": submission.detail[:500],
            "answered_at": timezone.now(),
            "asking_until": None,
        },
    )
    metrics.audit_witness_answered(witness.name, outcome=submission.outcome.value, status=submission.status)
    if submission.outcome == Outcome.COSIGNED:
        _cosignature_keep(head, submission)
        logger.info("Witness %s cosigned tree head %s", witness.name, head.size)
    elif submission.outcome == Outcome.UNREACHABLE:
        logger.warning("Witness %s did not answer for tree head %s: %s", witness.name, head.size, submission.detail)
    elif submission.outcome in REFUSALS:
        level = logging.ERROR if submission.outcome in (Outcome.AHEAD, Outcome.CONFLICT) else logging.WARNING
        logger.log(
            level,
            "Witness %s refused tree head %s (%s, old size %s): %s",
            witness.name,
            head.size,
            submission.outcome.value,
            submission.old_size,
            submission.detail,
        )


def _cosignature_keep(head: AuditTreeHead, submission: Submission) -> None:
    """Store the cosignature; the one that brings the head to its quorum publishes it, once: the head's
    row is locked while its cosignatures are counted, so two witnesses answering at once count in turn."""
    with transaction.atomic():
        AuditTreeHead.objects.select_for_update().filter(size=head.size).first()
        try:
            with transaction.atomic():
                AuditCosignature.objects.create(
                    head=head, witness=submission.witness.vkey, line=submission.line, timestamp=submission.timestamp
                )
        except IntegrityError:
            return  # a second task for the same head stored this witness's cosignature first
        cosigners = AuditCosignature.objects.filter(head=head, witness__in=_vkeys(witnesses_configured())).count()
        if cosigners != witness_quorum():
            return
        published = seal.latest_published_head()
        if published is None or published.size != head.size:
            return  # a later head was published first: this one is covered by it
        seal.checkpoint_publication_owed(head)


# The report for /readyz and /metrics ----------------------------------------------------------------


def witnesses_report() -> dict[str, Any] | None:
    """None without AUDIT_WITNESSES. Otherwise `status` (`ok`, or `degraded`: a witness refusing or not
    answering, the oldest unpublished head waiting longer than AUDIT_WITNESS_LAG_MAX_SECONDS, or
    AUDIT_WITNESSES malformed), the quorum, the latest and the published sizes, how long the oldest head
    not published has waited, and per witness (by name) its last answer and the largest size it
    cosigned. Why a witness refused is in the worker's log and the AuditWitnessAnswer row, not here:
    /readyz answers anyone."""
    if not settings.AUDIT_WITNESSES:
        return None
    witnesses = witnesses_configured()
    latest = seal.latest_head()
    published = seal.latest_published_head()
    latest_size = latest.size if latest else 0
    published_size = published.size if published else 0
    oldest_waiting = (
        AuditTreeHead.objects.filter(size__gt=published_size)
        .order_by("size")
        .values_list("timestamp", flat=True)
        .first()
    )
    waiting_seconds = max(0.0, time.time() - oldest_waiting / 1000) if oldest_waiting is not None else 0.0
    answers = {answer.witness: answer for answer in AuditWitnessAnswer.objects.filter(witness__in=_vkeys(witnesses))}
    entries: dict[str, dict[str, Any]] = {}
    refusing, unreachable = [], []
    for witness in witnesses:
        answer = answers.get(witness.vkey)
        if answer is not None and not answer.outcome:
            answer = None  # asked for the first time just now: no answer yet
        entries[witness.name] = {
            "last_answer": answer.outcome if answer else None,
            "http_status": answer.http_status if answer else None,
            "cosigned_size": witness_cosigned_size(witness.vkey),
        }
        if answer is not None and answer.outcome in REFUSALS:
            refusing.append(witness.name)
        if answer is not None and answer.outcome == Outcome.UNREACHABLE:
            unreachable.append(witness.name)
    lagging = waiting_seconds > float(settings.AUDIT_WITNESS_LAG_MAX_SECONDS)
    misconfigured = bool(witness_settings_problems())
    report: dict[str, Any] = {
        "status": "degraded" if refusing or unreachable or lagging or misconfigured else "ok",
        "quorum": witness_quorum(),
        "latest_size": latest_size,
        "published_size": published_size,
        "unpublished_seconds": round(waiting_seconds, 1),
        "lagging": lagging,
        "witnesses": entries,
    }
    if refusing:
        report["refusing"] = refusing
    if unreachable:
        report["unreachable"] = unreachable
    if misconfigured:
        report["misconfigured"] = True
    return report


def retry_countdown(retries: int) -> float:
    """Seconds before the task asks the witnesses that did not answer again: AUDIT_WITNESS_RETRY_SECONDS,
    then twice that, and so on, up to 300."""
    return float(min(RETRY_BACKOFF_MAX_SECONDS, max(1.0, float(settings.AUDIT_WITNESS_RETRY_SECONDS)) * 2**retries))
