"""Spending limits: what an agent session, and everything done for one customer, may propose.

Three limits, each off unless its setting is set (docs/payments.md):

* `SPEND_LIMIT_AGENT_DAILY` (`EUR:50000,USD:50000`): the amount one agent session may propose per
  calendar day (settings.TIME_ZONE), per currency, in minor units;
* `SPEND_LIMIT_CUSTOMER_30D` (`EUR:200000`): the amount proposed for one customer (the preview's
  actor, whichever session or person proposed it) over the last 30 days, per currency;
* `SPEND_LIMIT_AGENT_HOURLY_COUNT` (`60`): the proposals one agent session may make per rolling hour.

The amounts count proposals of actions that spend (`Action.proposes_amount` and
`Action.counts_toward_spending_limits`); the count
counts every proposal of the session. A preview counts while it waits for a person, is approved, being
executed, executed or needs attention; declined, rejected, expired, superseded, withdrawn and failed
previews do not, nor those whose effect the outside world undid later (`Action.spending_reversed`, e.g. a
refund that failed at the bank).

The check runs inside the proposal's transaction (every origin's: approvals.core.services.proposals), after
the action's policy and before the preview is inserted, holding a row lock on the agent session and on
the customer (SELECT ... FOR NO KEY UPDATE, which the preview's own foreign-key checks do not wait
for): two proposals of one session or for one customer are counted one after the other, so concurrent
proposals cannot race past a limit. On SQLite the transaction's write lock (IMMEDIATE) serialises them.

The execution gate asks again (`spend_limits_recheck`), reading without locks: the previews were
admitted one after the other under the locks above, so this only catches a limit lowered since, and
it runs under the preview's lock, which comes after the session's and the person's in the lock order.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, QuerySet, Sum
from django.utils import timezone

from approvals.core.errors import PolicyRefusal
from approvals.core.locks import spending_rows_lock
from approvals.core.money import format_minor
from approvals.core.registry import Action, registry
from approvals.models import AgentSession, Preview, PreviewStatus

# Previews whose amount is spent or may still be: waiting for a person, approved, executed, or in
# needs_attention (the effect may exist). The rest moved nothing and never will.
COUNTED_STATUSES = (
    PreviewStatus.AWAITING_CUSTOMER,
    PreviewStatus.AWAITING_STAFF,
    PreviewStatus.APPROVED,
    PreviewStatus.EXECUTED,
    PreviewStatus.NEEDS_ATTENTION,
)
CUSTOMER_PERIOD = timedelta(days=30)
COUNT_PERIOD = timedelta(hours=1)


class SpendLimitExceeded(PolicyRefusal):
    code = "spend_limit"


@dataclass(frozen=True)
class LimitUse:
    """One limit and what is used of it (minor units, or a count), for the console and the refusal."""

    code: str
    label: str
    currency: str  # "" for the count
    limit: int
    used: int

    @property
    def remaining(self) -> int:
        return max(self.limit - self.used, 0)

    def formatted(self, value: int) -> str:
        """`€500.00 (50000)` for an amount, `12` for the count."""
        return f"{format_minor(value, self.currency)} ({value})" if self.currency else str(value)

    @property
    def words(self) -> str:
        return f"{self.formatted(self.used)} of {self.formatted(self.limit)}"


def limits_configured() -> bool:
    return bool(
        settings.SPEND_LIMIT_AGENT_DAILY or settings.SPEND_LIMIT_CUSTOMER_30D or settings.SPEND_LIMIT_AGENT_HOURLY_COUNT
    )


def _limit_for(limits: dict[str, int], currency: str) -> int | None:
    """The limit for this currency; `*` covers currencies not named. None: no limit."""
    return limits.get(currency.upper(), limits.get("*"))


def day_start(now: datetime | None = None) -> datetime:
    """The start of today in settings.TIME_ZONE: the agent's daily total counts from here."""
    local = timezone.localtime(now or timezone.now())
    return local.replace(hour=0, minute=0, second=0, microsecond=0)


def spends_money(action: Action) -> bool:
    """Whether the action's amounts count toward the spending limits: it proposes amounts and declares
    them money going out (a refund); an action without money never does, whatever else it says."""
    return action.proposes_amount and action.counts_toward_spending_limits


def spending_actions() -> list[Action]:
    return [action for action in registry.actions.values() if spends_money(action)]


def _counted(queryset: QuerySet[Preview]) -> QuerySet[Preview]:
    queryset = queryset.filter(status__in=COUNTED_STATUSES)
    for action in registry.actions.values():
        reversed_ids = action.spending_reversed()
        if reversed_ids is not None:
            queryset = queryset.exclude(pk__in=reversed_ids)
    return queryset


def _amount_used(queryset: QuerySet[Preview], currency: str, excluding: Any = None) -> int:
    names = [action.name for action in spending_actions()]
    queryset = queryset.filter(action__in=names, currency=currency)
    if excluding is not None:
        queryset = queryset.exclude(pk=excluding)
    total = _counted(queryset).aggregate(total=Sum("amount_minor"))
    return int(total["total"] or 0)


def agent_daily_use(session: AgentSession, currency: str, *, now: datetime | None = None, excluding: Any = None) -> int:
    since = day_start(now)
    return _amount_used(Preview.objects.filter(agent_session=session, created_at__gte=since), currency, excluding)


def customer_period_use(actor_id: Any, currency: str, *, now: datetime | None = None, excluding: Any = None) -> int:
    since = (now or timezone.now()) - CUSTOMER_PERIOD
    return _amount_used(Preview.objects.filter(actor_id=actor_id, created_at__gte=since), currency, excluding)


def agent_hourly_count(session: AgentSession, *, now: datetime | None = None) -> int:
    since = (now or timezone.now()) - COUNT_PERIOD
    return _counted(Preview.objects.filter(agent_session=session, created_at__gte=since)).aggregate(n=Count("pk"))["n"]


def _refusal(use: LimitUse, amount_minor: int | None, message: str) -> SpendLimitExceeded:
    facts: dict[str, Any] = {"limit": use.limit, "used": use.used}
    if use.currency:
        facts.update(limit_minor=use.limit, used_minor=use.used, amount_minor=amount_minor, currency=use.currency)
    return SpendLimitExceeded(message, code=use.code, **facts)


def spend_limits_check(
    *,
    agent_session: AgentSession | None,
    actor: Any,
    action: Action,
    amount_minor: int | None,
    currency: str | None,
    excluding: Any = None,
    counts_as_agent_call: bool = True,
) -> SpendLimitExceeded | None:
    """Lock what the limits are counted on and say whether this proposal would go past one of them.

    Call inside the proposal's transaction, before its preview is inserted; the locks are held until it
    commits. `excluding` is a preview that no longer counts (the one a counter-proposal replaces, or the
    preview being executed). Returns the refusal, or None. Takes no lock and reads nothing when no limit
    applies.
    """
    # A proposal without an amount (an action moving no money) counts only toward the hourly count.
    money_out = spends_money(action) and amount_minor is not None and bool(currency)
    spent, spent_in = (amount_minor or 0, currency or "") if money_out else (0, "")
    daily = _limit_for(settings.SPEND_LIMIT_AGENT_DAILY, spent_in) if money_out and agent_session else None
    # The hourly count is of the agent's own calls; staff proposing for its session are not its calls.
    hourly = settings.SPEND_LIMIT_AGENT_HOURLY_COUNT if agent_session and counts_as_agent_call else None
    period = _limit_for(settings.SPEND_LIMIT_CUSTOMER_30D, spent_in) if money_out else None
    if daily is None and hourly is None and period is None:
        return None
    # One order everywhere: the agent session's row, then the person's (agent_session_create locks the
    # person alone; agent_sessions_revoke the session alone).
    spending_rows_lock(
        agent_session=agent_session if daily is not None or hourly is not None else None,
        person=actor if period is not None else None,
    )

    if hourly is not None and agent_session is not None:  # hourly is only set for an agent session
        refusal = _hourly_refusal(agent_session, hourly)
        if refusal is not None:
            return refusal
    if daily is not None and agent_session is not None:  # so is daily
        refusal = _daily_refusal(agent_session, daily, spent, spent_in, excluding)
        if refusal is not None:
            return refusal
    if period is not None:
        return _period_refusal(actor, period, spent, spent_in, excluding)
    return None


def spend_limits_recheck(*, preview: Preview, action: Action) -> SpendLimitExceeded | None:
    """At execution: whether this preview's amount, with everything else counted, is past a spending
    limit now (a limit lowered since it was proposed). The proposal count is not asked again."""
    if not spends_money(action) or preview.amount_minor is None or not preview.currency:
        return None
    if not (settings.SPEND_LIMIT_AGENT_DAILY or settings.SPEND_LIMIT_CUSTOMER_30D):
        return None
    session = preview.agent_session if preview.agent_session_id is not None else None
    spent, spent_in = preview.amount_minor, preview.currency
    daily = _limit_for(settings.SPEND_LIMIT_AGENT_DAILY, spent_in) if session is not None else None
    if daily is not None and session is not None:
        refusal = _daily_refusal(session, daily, spent, spent_in, preview.pk)
        if refusal is not None:
            return refusal
    period = _limit_for(settings.SPEND_LIMIT_CUSTOMER_30D, spent_in)
    if period is not None:
        return _period_refusal(preview.actor, period, spent, spent_in, preview.pk)
    return None


def _hourly_refusal(agent_session: AgentSession, hourly: int) -> SpendLimitExceeded | None:
    use = LimitUse("agent_hourly_count", "Proposals in the last hour", "", hourly, agent_hourly_count(agent_session))
    if use.used + 1 <= use.limit:
        return None
    return _refusal(
        use,
        None,
        (
            f"This agent session already made {use.used} proposals in the last hour, the most allowed "
            f"({use.limit}). Nothing was proposed; try again later or ask a person."
        ),
    )


def _daily_refusal(
    agent_session: AgentSession, daily: int, spent: int, spent_in: str, excluding: Any = None
) -> SpendLimitExceeded | None:
    used = agent_daily_use(agent_session, spent_in, excluding=excluding)
    use = LimitUse("agent_daily_limit", "Today", spent_in, daily, used)
    if use.used + spent <= use.limit:
        return None
    return _refusal(
        use,
        spent,
        (
            f"This agent session may propose at most {use.formatted(use.limit)} a day in {spent_in}; "
            f"{use.formatted(use.used)} is already proposed or refunded today, so "
            f"{format_minor(spent, spent_in)} ({spent}) more would go past the limit. "
            f"At most {use.formatted(use.remaining)} remains today."
        ),
    )


def _period_refusal(
    actor: Any, period: int, spent: int, spent_in: str, excluding: Any = None
) -> SpendLimitExceeded | None:
    used = customer_period_use(actor.pk, spent_in, excluding=excluding)
    use = LimitUse("customer_period_limit", "Customer, 30 days", spent_in, period, used)
    if use.used + spent <= use.limit:
        return None
    return _refusal(
        use,
        spent,
        (
            f"At most {use.formatted(use.limit)} in {spent_in} may be proposed for this customer in 30 days; "
            f"{use.formatted(use.used)} is already proposed or refunded, so {format_minor(spent, spent_in)} "
            f"({spent}) more would go past the limit. At most {use.formatted(use.remaining)} remains."
        ),
    )


def agent_session_limit_use(session: AgentSession) -> list[LimitUse]:
    """Each configured limit of this session with what it used (the console's agent sessions page)."""
    uses = []
    if settings.SPEND_LIMIT_AGENT_HOURLY_COUNT:
        uses.append(
            LimitUse(
                "agent_hourly_count",
                "Proposals in the last hour",
                "",
                settings.SPEND_LIMIT_AGENT_HOURLY_COUNT,
                agent_hourly_count(session),
            )
        )
    for currency, limit in sorted(settings.SPEND_LIMIT_AGENT_DAILY.items()):
        if currency != "*":
            uses.append(
                LimitUse(
                    "agent_daily_limit", f"Today in {currency}", currency, limit, agent_daily_use(session, currency)
                )
            )
    for currency, limit in sorted(settings.SPEND_LIMIT_CUSTOMER_30D.items()):
        if currency != "*":
            uses.append(
                LimitUse(
                    "customer_period_limit",
                    f"{session.user} in 30 days, {currency}",
                    currency,
                    limit,
                    customer_period_use(session.user_id, currency),
                )
            )
    return uses
