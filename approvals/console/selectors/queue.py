"""The review queue: its rows, filters, tab counts, approve-and-next, claims."""

from __future__ import annotations

import operator
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import reduce
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.core.paginator import Page, Paginator
from django.db import connection, transaction
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from approvals.console.notifications import escalation_due_before
from approvals.console.selectors.access import reviewable_actions, reviewable_previews
from approvals.core.quorum import counting_staff_approvers
from approvals.core.registry import (
    RiskFlag,
    registry,
)
from approvals.models import (
    Approval,
    ApprovalRole,
    Preview,
    PreviewStatus,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User  # settings.AUTH_USER_MODEL, as django-stubs resolves it


QUEUE_PAGE_SIZE = 50
# The tabs count a state that staff do not work on (the history, the customers' confirmations) only
# this far: the history grows for ever, and an exact count of it is a scan of every preview ever made.
STATE_COUNT_CAP = 1000
# A search looks at this many matching previews at most (the page says so when it stops there).
SEARCH_MATCH_CAP = 10_000
STAFF_WORK_STATES = (PreviewStatus.AWAITING_STAFF, PreviewStatus.NEEDS_ATTENTION)
DEFAULT_QUEUE_STATE = PreviewStatus.AWAITING_STAFF.value
ALL_STATES = "all"
AGE_LIMITS = {
    "5m": timedelta(minutes=5),
    "1h": timedelta(hours=1),
    "1d": timedelta(days=1),
    "7d": timedelta(days=7),
}


# The queue -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueFilters:
    action: str = ""
    state: str = DEFAULT_QUEUE_STATE
    currency: str = ""
    age: str = ""
    query: str = ""
    mine: bool = False
    overdue: bool = False


@dataclass(frozen=True)
class QueueRow:
    preview: Preview
    summary: str
    flags: list[RiskFlag] = field(default_factory=list)
    overdue: bool = False
    staff_approvals: int = 0

    @property
    def quorum(self) -> str:
        """`1 of 2` while an M-of-N preview collects staff approvals; empty for a single approval."""
        needed = self.preview.staff_approvals_needed
        return f"{self.staff_approvals} of {needed}" if needed > 1 else ""


@dataclass(frozen=True)
class StateCount:
    state: str
    label: str
    count: int
    at_least: bool = False  # more than `count` (STATE_COUNT_CAP) are in this state


@dataclass
class Queue:
    page: Page
    rows: list[QueueRow]
    counts: list[StateCount]
    total: int
    total_all: int
    total_all_at_least: bool  # a state's count stopped at its cap: total_all is a floor
    filters: QueueFilters
    actions: list[str] = field(default_factory=list)
    #: Whether an action the queue lists proposes amounts: the amount column and the currency filter
    #: are shown only then.
    shows_amounts: bool = False
    #: A search stopped at SEARCH_MATCH_CAP matches: the counts are floors, the list is of those found.
    search_capped: bool = False

    @property
    def search_match_cap(self) -> str:
        return f"{SEARCH_MATCH_CAP:,}"


def _search(within: QuerySet[Preview], query: str, *, backlog: bool = False) -> QuerySet[Preview]:
    """The previews of `within` found by subject id (an order or invoice number), the customer's username
    or email, a payload field an action makes searchable (an invoice's recipient:
    Action.searchable_payload_fields), or the id; at most SEARCH_MATCH_CAP of them.

    Each test is a query of its own, carrying `within`'s filters, and the previews are those of their
    union: each is answered by its trigram index (approvals.core.search_indexes), so a search costs what
    it finds, not the length of the history. (One `OR` across the previews and their customers was a scan
    of every preview joined with every customer: 2 s per tab count on a million previews,
    docs/scaling.md.) UNION ALL under a LIMIT stops reading once the cap is found; `IN` ignores the
    duplicates. With `backlog` (`within` is in one of STAFF_WORK_STATES), one filter with the tests OR'ed."""
    within = within.order_by()
    customers = get_user_model().objects.filter(Q(username__icontains=query) | Q(email__icontains=query))
    tests = [Q(subject_id__icontains=query), Q(actor__in=customers.order_by().values("pk"))]
    tests += [Q(**{f"payload__{name}__icontains": query}) for name in registry.searchable_payload_fields()]
    try:
        tests.append(Q(pk=uuid.UUID(query)))
    except ValueError:
        pass
    if backlog:
        # A state staff work on holds what the reviewers are behind on, not the history: reading its rows
        # by the (action, status) index and testing each is cheaper than a trigram index over every
        # preview, which the planner would otherwise AND with it (8.5 ms on a million previews).
        return within.filter(reduce(operator.or_, tests))
    first, *rest = [within.filter(test).values("pk") for test in tests]
    return Preview.objects.filter(pk__in=first.union(*rest, all=True)[:SEARCH_MATCH_CAP])


@contextmanager
def _without_parallel_workers() -> Iterator[None]:
    """The statements inside planned without parallel workers (PostgreSQL; elsewhere nothing changes).

    A search's lookups find a few rows in trigram indexes; the planner's estimate for a `LIKE '%...%'`
    is far above that, so on a large table it starts two parallel workers for a one-row answer, which
    took 6 of a search's 10 ms on a million previews (docs/scaling.md)."""
    if connection.vendor != "postgresql":
        yield
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        yield


def review_queue(*, user: User, filters: QueueFilters, page_number: Any = 1) -> Queue:
    """Previews of the kinds this reviewer decides, oldest first, with counts per state (below); a search
    is planned without parallel workers."""
    if filters.query:
        with _without_parallel_workers():
            return _review_queue(user=user, filters=filters, page_number=page_number)
    return _review_queue(user=user, filters=filters, page_number=page_number)


def _review_queue(*, user: User, filters: QueueFilters, page_number: Any = 1) -> Queue:
    """Previews of the kinds this reviewer decides, oldest first, with counts per state.

    A constant number of queries whatever the page size and however long the history: rows come
    with their actor, and the counts per state (`_state_counts`) cover the same filters (except the
    state) without counting past STATE_COUNT_CAP in a state that staff do not work on. A search counts
    and lists at most SEARCH_MATCH_CAP matches (`search_capped` says when it stopped there).
    """
    actions = reviewable_actions(user=user)
    scoped = Preview.objects.filter(action__in=actions)
    if filters.action:
        scoped = scoped.filter(action=filters.action)
    if filters.currency:
        scoped = scoped.filter(currency=filters.currency)
    if filters.age in AGE_LIMITS:
        scoped = scoped.filter(created_at__lte=timezone.now() - AGE_LIMITS[filters.age])
    if filters.mine:
        scoped = scoped.filter(claim__claimed_by=user)
    due = escalation_due_before()
    if filters.overdue:
        overdue = Q(status=PreviewStatus.AWAITING_STAFF, status_changed_at__lte=due)
        scoped = scoped.filter(overdue) if due else scoped.none()
    listed = scoped if filters.state == ALL_STATES else scoped.filter(status=filters.state)

    search_capped = False
    if filters.query:
        # The matches are counted in one statement, every state exact; the listed state's are found on
        # their own (with the state in each test), so a cap reached over all states still lists its own.
        found = _search(scoped, filters.query)
        counts = _state_counts(found, listed_state=filters.state, all_exact=True)
        total_all = sum(c.count for c in counts)
        search_capped = total_all >= SEARCH_MATCH_CAP
        counts = [replace(c, at_least=search_capped) for c in counts]
        listed = _search(listed, filters.query, backlog=filters.state in STAFF_WORK_STATES)
        total = listed.count() if search_capped else total_all
        if not search_capped and filters.state != ALL_STATES:
            total = next((c.count for c in counts if c.state == filters.state), 0)
        total_all_at_least = search_capped
    else:
        counts = _state_counts(scoped, listed_state=filters.state)
        total_all = sum(c.count for c in counts)
        total_all_at_least = any(c.at_least for c in counts)
        if filters.state != ALL_STATES:
            total = next((c.count for c in counts if c.state == filters.state), 0)
        else:
            if total_all_at_least:  # listed: the pages need the exact count
                total_all, total_all_at_least = scoped.count(), False
            total = total_all
    listed = listed.select_related("actor", "agent_session", "proposed_by", "claim__claimed_by").order_by(
        "created_at", "pk"
    )
    paginator = Paginator(listed, QUEUE_PAGE_SIZE)
    paginator.count = total  # known from the counts per state: no second COUNT over the queue
    page = paginator.get_page(page_number)
    rows = queue_rows(list(page.object_list), due=due)
    return Queue(
        page=page,
        rows=rows,
        counts=counts,
        total=total,
        total_all=total_all,
        total_all_at_least=total_all_at_least,
        filters=filters,
        actions=actions,
        shows_amounts=_proposes_amounts([filters.action] if filters.action else actions),
        search_capped=search_capped,
    )


def _proposes_amounts(action_names: list[str]) -> bool:
    return any((action := registry.action(name)) is not None and action.proposes_amount for name in action_names)


def _state_counts(scoped: QuerySet[Preview], *, listed_state: str, all_exact: bool = False) -> list[StateCount]:
    """Counts per state over the filtered previews, in PreviewStatus's order.

    The states staff act on (waiting for staff, needs attention) and the listed one, whose pages need
    the number, come exact from one grouped query; COUNT(*) rather than COUNT(id) is answered from the
    (action, status) index alone. Every other state (the customer's to confirm, the history) is
    counted up to STATE_COUNT_CAP, a query each that stops there; with `all_exact`, every state comes from the
    one grouped query.
    """
    exact_states = [s for s in PreviewStatus if all_exact or s in STAFF_WORK_STATES or s.value == listed_state]
    exact = dict(scoped.filter(status__in=exact_states).order_by().values_list("status").annotate(n=Count("*")))
    counts = []
    for state in PreviewStatus:
        if state in exact_states:
            counts.append(StateCount(state.value, state.label, exact.get(state.value, 0)))
        else:
            found = scoped.filter(status=state).order_by()[: STATE_COUNT_CAP + 1].count()
            capped = found > STATE_COUNT_CAP
            counts.append(StateCount(state.value, state.label, min(found, STATE_COUNT_CAP), at_least=capped))
    return counts


def queue_rows(previews: list[Preview], *, due: datetime | None = None) -> list[QueueRow]:
    """Rows with their risk flags (a query per action kind) and staff approvals (one query)."""
    flags: dict[Any, list[RiskFlag]] = {}
    for name in {p.action for p in previews}:
        action = registry.action(name)
        if action is not None:
            flags.update(action.risk_flags_many([p for p in previews if p.action == name]))
    quorum_ids = [p.pk for p in previews if p.staff_approvals_needed > 1]
    approvals: dict[Any, list[Approval]] = {}
    if quorum_ids:
        for approval in Approval.objects.filter(
            preview_id__in=quorum_ids, role=ApprovalRole.STAFF, lapsed_at__isnull=True
        ).only("preview_id", "role", "approver_id", "lapsed_at"):
            approvals.setdefault(approval.preview_id, []).append(approval)
    return [
        QueueRow(
            preview=p,
            summary=queue_summary(p),
            flags=flags.get(p.pk, []),
            overdue=due is not None and p.status == PreviewStatus.AWAITING_STAFF and p.status_changed_at <= due,
            staff_approvals=len(counting_staff_approvers(p, approvals.get(p.pk, []))),
        )
        for p in previews
    ]


def next_to_review(*, user: User, after: Preview) -> Preview | None:
    """Approve-and-next: the oldest preview after this one (else the oldest) that this reviewer can
    decide now: waiting for staff, not theirs, not approved by them, not claimed by someone else."""
    candidates = (
        reviewable_previews(user=user)
        .filter(status=PreviewStatus.AWAITING_STAFF)
        .exclude(pk=after.pk)
        .exclude(actor=user)
        .exclude(proposed_by=user)
        .exclude(approvals__role=ApprovalRole.STAFF, approvals__approver=user, approvals__lapsed_at__isnull=True)
        .filter(Q(claim__isnull=True) | Q(claim__claimed_by=user))
        .order_by("created_at", "pk")
    )
    return candidates.filter(created_at__gte=after.created_at).first() or candidates.first()


def claim_of(preview: Preview) -> Any:
    """The preview's claim, or None (without a query when it was selected with the preview)."""
    try:
        return preview.claim
    except Preview.claim.RelatedObjectDoesNotExist:
        return None


def queue_summary(preview: Preview) -> str:
    action = registry.action(preview.action)
    return action.review_summary(preview) if action else f"{preview.action} on {preview.subject_id}"
