"""`manage.py local_refund_event REFUND_ID --status failed [--reason TEXT]`: the local gateway's bank.

Moves a refund of the local gateway (PAYMENT_GATEWAY=local, `lr_…`) to a new status and delivers the
event Stripe would send, through the same code as POST /payments/stripe/webhook: so `make run` shows a
refund that is pending at the bank, then succeeds, fails or is cancelled (docs/payments.md).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from refunds.events import local_refund_status_set
from refunds.models import LocalGatewayRefund, RefundStatus


class Command(BaseCommand):
    help = "Change a local gateway refund's status as the bank would, and deliver the provider event."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("refund_id", help="The local gateway's refund id (lr_…).")
        parser.add_argument("--status", required=True, choices=RefundStatus.values)
        parser.add_argument(
            "--reason", default="", help="The bank's reason (Stripe's failure_reason or pending_reason)."
        )

    def handle(
        self,
        *args: Any,
        refund_id: str,
        status: str,
        reason: str,
        **options: Any,
    ) -> None:
        try:
            outcome = local_refund_status_set(refund_id=refund_id, status=status, reason=reason)
        except LocalGatewayRefund.DoesNotExist as missing:
            raise CommandError(f"The local gateway has no refund {refund_id}.") from missing
        self.stdout.write(f"{refund_id}: {outcome.result}")
