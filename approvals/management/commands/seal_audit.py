"""The audit sealer: one pass, or with --loop a long-running process (run exactly one; a second one
finds the sealer's lock taken and seals nothing)."""

import signal
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from approvals.audit.seal import audit_seal


class Command(BaseCommand):
    help = "Seal committed audit records into the Merkle tree and sign its head; --loop keeps doing it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="Keep sealing until stopped (TERM or INT).")
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="Seconds between passes with --loop (default AUDIT_SEAL_INTERVAL_SECONDS).",
        )

    def handle(self, *args: Any, loop: bool = False, interval: float | None = None, **options: Any) -> None:
        if not settings.AUDIT_SIGNING_KEY:
            raise CommandError("Set AUDIT_SIGNING_KEY (an Ed25519 private key, base64): tree heads are signed.")
        if not loop:
            self.stdout.write(f"Sealed {audit_seal()} records.")
            return
        interval = settings.AUDIT_SEAL_INTERVAL_SECONDS if interval is None else interval
        stopping = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopping.append(True))
        self.stdout.write(f"Sealing committed audit records every {interval} s until TERM.")
        self.stdout.flush()
        while not stopping:
            close_old_connections()
            try:
                audit_seal()
            except Exception:  # noqa: BLE001 - logged; a database that is away comes back
                self.stderr.write("The seal failed; trying again.")
                import logging

                logging.getLogger("approvals.audit.seal").exception("The seal failed")
                time.sleep(max(interval, 1.0))
            time.sleep(interval)
