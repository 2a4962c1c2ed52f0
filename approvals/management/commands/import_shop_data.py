import getpass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.site.shop_import import ShopDataInvalid, shop_data_import


def operator_name(given: str | None) -> str:
    """Who runs the import, for its audit records: `--operator`, required outside DEBUG (a shared
    service account says nothing); in DEBUG and the demo the OS user."""
    if given and given.strip():
        return given.strip()
    if not (settings.DEBUG or settings.DEMO):
        raise CommandError("Name the person running the import with --operator NAME.")
    try:
        return getpass.getuser()
    except (KeyError, OSError) as error:
        raise CommandError("Name the person running the import with --operator NAME.") from error


class Command(BaseCommand):
    help = "Create or update customers, staff, orders, invoices and standing approvals from a JSON file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument(
            "--operator",
            help="Who runs this import, recorded with every change in the audit log (required unless DEBUG).",
        )

    def handle(self, *args: Any, file: Path, operator: str | None = None, **options: Any) -> None:
        name = operator_name(operator)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"Cannot read {file}: {error}") from error
        try:
            summary = shop_data_import(text, operator=name)
        except ShopDataInvalid as invalid:
            for problem in invalid.problems:
                self.stderr.write(problem)
            raise CommandError(f"{len(invalid.problems)} problem(s) in {file}; nothing was written.") from invalid
        for key, counts in summary.items():
            if counts:
                parts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
                self.stdout.write(f"{key}: {parts}")
        self.stdout.write(self.style.SUCCESS(f"Imported {file}."))
