"""The customer behind a preview, as a reviewer reads them: their earlier previews of the same action
kind across subjects (for refunds: the refunds paid before on any of their orders)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Sum

from approvals.core.money import format_minor
from approvals.core.registry import registry
from approvals.models import Preview

HISTORY_ROWS = 20  # the latest ones listed; the count and totals take them all


@dataclass(frozen=True)
class CustomerHistory:
    noun: str  # "refunds"
    count: int
    totals: list[str]  # one formatted total per currency, e.g. ["€25.00", "¥500"]
    rows: list[Preview]  # the latest HISTORY_ROWS, newest first

    @property
    def more(self) -> int:
        return self.count - len(self.rows)


def customer_history(*, preview: Preview) -> CustomerHistory | None:
    """The action's own choice of the person's earlier previews (`Action.customer_history`), counted and
    totalled per currency here, the engine's part: None for an action that keeps no history."""
    action = registry.action(preview.action)
    earlier = action.customer_history(preview) if action else None
    if action is None or earlier is None:
        return None
    per_currency = (
        earlier.exclude(currency__isnull=True)
        .values("currency")
        .annotate(total=Sum("amount_minor"), n=Count("pk"))
        .order_by("currency")
    )
    totals = [format_minor(row["total"], row["currency"]) for row in per_currency]
    rows = list(earlier.select_related("actor").order_by("-created_at", "-pk")[:HISTORY_ROWS])
    return CustomerHistory(noun=action.history_noun, count=earlier.count(), totals=totals, rows=rows)
