from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from approvals.shop_import import ShopDataInvalid, shop_data_import


class Command(BaseCommand):
    help = "Create or update customers, staff, orders, invoices and standing approvals from a JSON file."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("file", type=Path)

    def handle(self, *args, file: Path, **options):  # type: ignore[no-untyped-def]
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"Cannot read {file}: {error}") from error
        try:
            summary = shop_data_import(text)
        except ShopDataInvalid as invalid:
            for problem in invalid.problems:
                self.stderr.write(problem)
            raise CommandError(f"{len(invalid.problems)} problem(s) in {file}; nothing was written.") from invalid
        for key, counts in summary.items():
            if counts:
                parts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
                self.stdout.write(f"{key}: {parts}")
        self.stdout.write(self.style.SUCCESS(f"Imported {file}."))
