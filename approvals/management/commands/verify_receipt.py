"""Check an audit receipt offline: no database, only the public key."""

import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.core.management.base import BaseCommand, CommandParser

from approvals.audit.log import private_key_from, public_key_from, receipt_check


class Command(BaseCommand):
    help = (
        "Check an audit receipt (GET /api/agent/previews/<id>/receipt, or the console's download) with the "
        "audit public key only: exit 0 when valid, 1 when not. Uses no database."
    )
    requires_system_checks = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE", help="The receipt (JSON).")
        parser.add_argument(
            "--public-key",
            metavar="KEY",
            help="The audit public key, base64 of its 32 bytes or a file holding it (default: AUDIT_SIGNING_KEY's).",
        )

    def handle(self, *args: Any, file: str, public_key: str | None = None, **options: Any) -> None:
        try:
            key = public_key_from(public_key) if public_key else _configured_public_key()
        except ValueError as error:
            self.stderr.write(f"Bad public key: {error}.")
            raise SystemExit(1) from error
        if key is None:
            self.stderr.write("Give the audit public key with --public-key.")
            raise SystemExit(1)
        try:
            with open(file, encoding="utf-8") as opened:
                receipt = json.load(opened)
        except (OSError, ValueError) as error:
            self.stderr.write(f"Can't read the receipt: {error}.")
            raise SystemExit(1) from error
        check = receipt_check(receipt, key)
        if not check.valid:
            for problem in check.problems:
                self.stderr.write(f"INVALID: {problem}.")
            raise SystemExit(1)
        head = receipt["tree_head"]
        self.stdout.write(
            self.style.SUCCESS(
                f"Receipt valid: {check.records} audit records of preview {receipt.get('preview')} are in the audit "
                f"log's tree of {head['size']} records, root {head['root_hash']}, signed at {head['timestamp']} ms."
            )
        )


def _configured_public_key() -> Ed25519PublicKey | None:
    from django.conf import settings

    return private_key_from(settings.AUDIT_SIGNING_KEY).public_key() if settings.AUDIT_SIGNING_KEY else None
