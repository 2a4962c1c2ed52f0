"""Bounded records of tool calls refused before any policy ran (throttled, malformed, forbidden).

A flood of such calls must be visible without filling the append-only audit log: each call adds one
to a counter row per (agent session, minute, kind) with the hash and the first characters of its body;
only the first AGENT_REJECTED_CALLS_AUDITED_PER_MINUTE calls of a minute are also audited in full.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from approvals.models import AgentSession, RejectedCallKind, RejectedCallTally

SAMPLE_CHARACTERS = 200


def rejected_call_count(*, agent_session: AgentSession, kind: RejectedCallKind, body: str, code: str) -> int:
    """Count one refused call; returns how many of this kind the session made in this minute so far."""
    minute = timezone.now().replace(second=0, microsecond=0)
    # U+0000 cannot be stored in PostgreSQL text; the hash is of the body as received.
    sample = body[:SAMPLE_CHARACTERS].replace("\x00", "\ufffd")
    digest = hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
    values = {"last_arguments_sha256": digest, "last_arguments_sample": sample, "last_code": code[:64]}
    tally = RejectedCallTally.objects.filter(agent_session=agent_session, minute=minute, kind=kind)
    for _attempt in range(2):
        # A single UPDATE count = count + 1: concurrent calls never lose a count.
        if tally.update(count=F("count") + 1, **values):
            return tally.values_list("count", flat=True).first() or 1
        try:
            with transaction.atomic():
                RejectedCallTally.objects.create(
                    agent_session=agent_session, minute=minute, kind=kind, count=1, **values
                )
            return 1
        except IntegrityError:
            continue  # another call of the same minute created the row first: add to it
    return settings.AGENT_REJECTED_CALLS_AUDITED_PER_MINUTE + 1


def rejected_call_audit_due(count: int) -> bool:
    return count <= settings.AGENT_REJECTED_CALLS_AUDITED_PER_MINUTE
