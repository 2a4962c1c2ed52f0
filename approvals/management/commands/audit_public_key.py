from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.audit import tlog
from approvals.audit.log import private_key_from, public_key_text


class Command(BaseCommand):
    help = (
        "Print the audit log's public key: base64, for verify_receipt; with --note, the verifier key in "
        "c2sp.org/signed-note form (<origin>+<key ID>+<key>), for C2SP tools and witnesses."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--note", action="store_true", help="The verifier key (vkey) the log's checkpoint notes verify with."
        )

    def handle(self, *args: Any, note: bool = False, **options: Any) -> None:
        if not settings.AUDIT_SIGNING_KEY:
            raise CommandError("AUDIT_SIGNING_KEY is not set.")
        keys = [private_key_from(part) for part in settings.AUDIT_SIGNING_KEY.split(",") if part.strip()]
        for key in keys:  # two during a key rotation, the new one first
            if note:
                self.stdout.write(tlog.verifier_key(settings.AUDIT_LOG_ORIGIN, key.public_key()).text())
            else:
                self.stdout.write(public_key_text(key))
