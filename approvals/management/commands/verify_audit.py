from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from approvals.audit.log import public_key_from
from approvals.audit.seal import audit_verify, checkpoints_read
from approvals.audit.seal import public_key as configured_public_key


class Command(BaseCommand):
    help = (
        "Check the audit log: every record against its Merkle leaf and the stored tiles, each tile against "
        "the level above, every signed tree head and its checkpoint note, and the published checkpoints "
        "(--checkpoints, by default AUDIT_CHECKPOINT_FILE). From the last checkpoint found intact on, or "
        "everything with --full. Exits 1 at the first inconsistency."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--checkpoints",
            metavar="FILE",
            help="JSON Lines of tree heads published earlier (default: AUDIT_CHECKPOINT_FILE, when set).",
        )
        parser.add_argument(
            "--full",
            action="store_true",
            help="Read every record again (by default: those after the last checkpoint found intact).",
        )
        parser.add_argument(
            "--public-key",
            metavar="KEY",
            help="The audit public key (base64, or a file holding it); default: AUDIT_SIGNING_KEY's.",
        )

    def handle(
        self,
        *args: Any,
        checkpoints: str | None = None,
        public_key: str | None = None,
        full: bool = False,
        **options: Any,
    ) -> None:
        try:
            key = public_key_from(public_key) if public_key else configured_public_key()
        except ValueError as error:
            self.stderr.write(f"Bad public key: {error}.")
            raise SystemExit(1) from error
        path = checkpoints or settings.AUDIT_CHECKPOINT_FILE
        try:
            published = list(checkpoints_read(path)) if path else []
        except FileNotFoundError:
            if checkpoints:
                self.stderr.write(f"No checkpoint file {checkpoints}.")
                raise SystemExit(1) from None
            published = []  # the configured file is created with the first published head
        except ValueError as error:
            self.stderr.write(f"The checkpoint file {path} is not JSON Lines: {error}.")
            raise SystemExit(1) from error
        summary = audit_verify(public_key=key, checkpoints=published, full=full)
        if summary.problem is not None:
            where = f" (first bad index {summary.problem.index})" if summary.problem.index is not None else ""
            self.stderr.write(f"Audit log inconsistent{where}: {summary.problem.message}.")
            raise SystemExit(1)
        self.stdout.write(
            self.style.SUCCESS(
                f"Audit log intact: {summary.leaves} records sealed under {summary.heads} signed tree heads, "
                f"{summary.checkpoints} published checkpoints match; {summary.unsealed} records not sealed yet."
            )
        )
        for note in summary.notes:
            self.stdout.write(f"Note: {note}.")
