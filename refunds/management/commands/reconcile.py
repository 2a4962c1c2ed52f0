"""`manage.py reconcile [--since DATE]`: compare the books with the payment provider, per order.

Prints one line per drift nobody acknowledged, naming the order, and exits 1 while there is any; 0
when everything agrees (or every drift was acknowledged). Exits 2 when the provider could not be asked
about some order. Repairs nothing (docs/payments.md).
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from refunds.reconciliation import reconcile_run


def _date(value: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(value)
    except ValueError as error:
        raise CommandError(f"--since {value!r} is not a date (YYYY-MM-DD).") from error


class Command(BaseCommand):
    help = "Reconcile refunds with the payment provider; exit 1 while unacknowledged drift exists."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since",
            type=_date,
            default=None,
            help="Only orders placed, changed or refunded on or after this date (YYYY-MM-DD).",
        )

    def handle(self, *args: Any, since: datetime.date | None = None, **options: Any) -> None:
        run = reconcile_run(since=since)
        for drift in run.unacknowledged:
            self.stdout.write(f"drift order={drift.order.number} kind={drift.kind} {drift.message}")
        acknowledged = len(run.drifts) - len(run.unacknowledged)
        for error in run.errors:
            self.stderr.write(f"error {error}")
        self.stderr.write(
            f"{run.orders_checked} order(s) checked: {len(run.unacknowledged)} unacknowledged drift(s), "
            f"{acknowledged} acknowledged, {len(run.errors)} error(s)."
        )
        if run.unacknowledged:
            sys.exit(1)
        if run.errors:
            sys.exit(2)
