from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from approvals.audit.log import private_key_from, public_key_text


class Command(BaseCommand):
    help = "Print the audit log's public key (base64), for shops to check receipts with (verify_receipt)."

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.AUDIT_SIGNING_KEY:
            raise CommandError("AUDIT_SIGNING_KEY is not set.")
        self.stdout.write(public_key_text(private_key_from(settings.AUDIT_SIGNING_KEY)))
