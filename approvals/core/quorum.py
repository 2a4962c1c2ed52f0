"""M-of-N staff approval (REVIEW_QUORUM): how many distinct staff members must approve a preview,
and who counts.

`REVIEW_QUORUM=refund_order:EUR:100000:2,send_invoice:*:0:2` reads: a refund in EUR from €1,000.00
(100000 minor units) needs two staff approvers; every invoice send needs two. Per action and currency
the band with the highest starting amount at or below the preview's amount applies (`*` matches any
currency). The number is fixed on the preview when it is proposed (and covered by its digest).

Who never counts: the preview's actor, whoever proposed a preview of its chain (a counter-proposal's
author, a re-proposal's staff member), and an approval that lapsed (its approver lost the right before
the preview executed: approvals.core.services.rights); each person counts once. Any rejection ends the
preview (preview_decline), whatever was approved.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from approvals.models import ApprovalRole

ANY_CURRENCY = "*"


@dataclass(frozen=True)
class QuorumBand:
    action: str
    currency: str
    from_minor: int
    approvers: int


def parse_quorum(value: str | Iterable[str]) -> list[QuorumBand]:
    """Parse `action:CURRENCY:from_minor:approvers,…`; raises ValueError naming the bad item."""
    items = value.split(",") if isinstance(value, str) else list(value)
    bands = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        parts = [part.strip() for part in item.split(":")]
        if len(parts) != 4 or not parts[0] or not parts[1]:
            raise ValueError(f"REVIEW_QUORUM item {item!r} is not action:CURRENCY:from_minor:approvers")
        try:
            from_minor, approvers = int(parts[2]), int(parts[3])
        except ValueError as error:
            raise ValueError(f"REVIEW_QUORUM item {item!r}: the amount and the count must be integers") from error
        if from_minor < 0 or not 1 <= approvers <= 10:
            raise ValueError(f"REVIEW_QUORUM item {item!r}: amount at least 0, approvers from 1 to 10")
        bands.append(QuorumBand(parts[0], parts[1].upper(), from_minor, approvers))
    return bands


@lru_cache(maxsize=8)
def _bands(value: str) -> tuple[QuorumBand, ...]:
    return tuple(parse_quorum(value))


def staff_approvals_needed(action: str, currency: str | None, amount_minor: int | None) -> int | None:
    """The number of distinct staff approvers REVIEW_QUORUM asks for, or None when no band applies.

    Asked only for an action that proposes amounts (Action.proposes_amount; an action without money
    never gets a quorum); a preview of one without an amount is met only by `*` bands from 0."""
    if not settings.REVIEW_QUORUM:
        return None
    currencies = (currency.upper(), ANY_CURRENCY) if currency else (ANY_CURRENCY,)
    amount = amount_minor if amount_minor is not None else 0
    matching = [
        band
        for band in _bands(settings.REVIEW_QUORUM)
        if band.action == action and band.currency in currencies and amount >= band.from_minor
    ]
    if not matching:
        return None
    # The highest band reached wins; an exact currency beats `*` at the same amount.
    best = max(matching, key=lambda band: (band.from_minor, band.currency != ANY_CURRENCY))
    return best.approvers


def apply_quorum(
    *, action: str, currency: str | None, amount_minor: int | None, required: list[str]
) -> tuple[list[str], int]:
    """The required roles and staff count for a new preview: a band that applies makes staff review
    required (even below the staff threshold) with that many approvers."""
    needed = staff_approvals_needed(action, currency, amount_minor)
    if needed is None:
        return required, 1
    if ApprovalRole.STAFF not in required:
        required = [*required, ApprovalRole.STAFF.value]
    return required, needed


def never_counts(preview: Any) -> set[Any]:
    """People whose staff approval of this preview can never count, as the preview itself says: its
    actor and its proposer (approvals.core.services.rights.proposer_chain adds the chain's earlier proposers)."""
    return {pk for pk in (preview.actor_id, preview.proposed_by_id) if pk is not None}


def counting_staff_approvers(preview: Any, approvals: Iterable[Any]) -> set[Any]:
    """The distinct staff approvers who count, from the preview's approvals (lapsed ones never do)."""
    excluded = never_counts(preview)
    return {
        a.approver_id
        for a in approvals
        if a.role == ApprovalRole.STAFF and a.lapsed_at is None and a.approver_id not in excluded
    }


def needs_counting(preview: Any, role: str) -> bool:
    """Whether `role`'s approval alone may not complete the preview's approvals (other roles, a quorum,
    a preview proposed by staff): then every standing approval is read and counted."""
    others = any(required != role for required in preview.required_approvals)
    counted = role == ApprovalRole.STAFF and preview.staff_approvals_needed > 1
    return others or counted or preview.proposed_by_staff


def approved_roles(preview: Any, approvals: Iterable[Any]) -> set[str]:
    """The roles whose approval is complete, from the approvals that stand."""
    standing = [a for a in approvals if a.lapsed_at is None]
    roles = {a.role for a in standing}
    counted = counting_staff_approvers(preview, standing)
    if ApprovalRole.STAFF in roles and len(counted) < preview.staff_approvals_needed:
        roles.discard(ApprovalRole.STAFF.value)
    return roles


def progress(preview: Any, approvals: Iterable[Any] | None = None) -> tuple[int, int]:
    """(staff approvals that count, staff approvals needed), e.g. (1, 2) shown as "1 of 2"."""
    rows = preview.approvals.all() if approvals is None else approvals
    return len(counting_staff_approvers(preview, rows)), preview.staff_approvals_needed


def quorum_refusal(preview: Any, approvals: Iterable[Any]) -> str | None:
    """For the executor: why the standing staff approvals do not make the quorum (each bound to the
    digest and subject version), or None."""
    if ApprovalRole.STAFF not in preview.required_approvals:
        return None
    valid = [
        a
        for a in approvals
        if a.digest == preview.digest
        and a.subject_version == preview.subject_version
        and a.created_at <= preview.expires_at
    ]
    have, need = len(counting_staff_approvers(preview, valid)), preview.staff_approvals_needed
    if have < need:
        return f"{have} of the {need} staff approvals needed are recorded for this exact preview."
    return None


@register()
def review_settings_are_usable(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """`manage.py check` (and every start): REVIEW_QUORUM parses, signed webhooks have their secret."""
    problems: list[CheckMessage] = []
    try:
        parse_quorum(settings.REVIEW_QUORUM)
    except ValueError as error:
        problems.append(Error(str(error), hint="REVIEW_QUORUM=refund_order:EUR:100000:2,…", id="approvals.E101"))
    if settings.REVIEW_NOTIFY_WEBHOOKS and not settings.REVIEW_NOTIFY_SECRET:
        problems.append(
            Error(
                "REVIEW_NOTIFY_WEBHOOKS is set but REVIEW_NOTIFY_SECRET is not: nothing would be sent unsigned.",
                hint="Set REVIEW_NOTIFY_SECRET to a whsec_… secret shared with the receivers.",
                id="approvals.E102",
            )
        )
    return problems
