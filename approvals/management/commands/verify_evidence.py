"""Check an evidence bundle offline: no database, only the log's verifier key given."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from approvals.audit.evidence_check import verify


class Command(BaseCommand):
    help = (
        "Check an evidence bundle (export_evidence, or the console's download) with the log's verifier key "
        "(<origin>+<key ID>+<key>, from audit_public_key --note): exit 0 when valid, 1 when not, each "
        "failure on its own line. Uses no database and no network."
    )
    requires_system_checks = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE", help="The bundle (a zip).")
        parser.add_argument(
            "--log-key",
            metavar="VKEY",
            action="append",
            required=True,
            help="The log's verifier key, or a file of them; give it twice across a key rotation.",
        )
        parser.add_argument(
            "--witness-key", metavar="VKEY", action="append", default=[], help="A witness's verifier key (repeatable)."
        )
        parser.add_argument("--quorum", metavar="N", type=int, help="How many witness keys must cosign (default: all).")
        parser.add_argument("--rp-id", metavar="RP_ID", help="The WebAuthn RP ID passkey signatures must name.")
        parser.add_argument(
            "--origin", metavar="ORIGIN", action="append", default=[], help="An origin passkey signatures may name."
        )

    def handle(
        self,
        *args: Any,
        file: str,
        log_key: list[str],
        witness_key: list[str],
        quorum: int | None = None,
        rp_id: str | None = None,
        origin: list[str] | None = None,
        **options: Any,
    ) -> None:
        code = verify(
            file, log_key, witness_key, quorum, out=self.stdout, err=self.stderr, rp_id=rp_id, origins=origin or ()
        )
        if code:
            raise SystemExit(code)
