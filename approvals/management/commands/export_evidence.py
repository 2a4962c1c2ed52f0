"""Write a preview's evidence bundle (a zip for a dispute) to a file."""

from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.audit.evidence import EvidenceNotSealed, evidence_bundle
from approvals.models import Preview


class Command(BaseCommand):
    help = (
        "Write the evidence bundle of a preview (its audit records with their tlog proofs, the signed "
        "checkpoint, the preview and its digest, consent, approvals, execution, the provider's references, "
        "a README) to FILE; anyone checks it offline with verify_evidence and the log's verifier key."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("preview_id", metavar="PREVIEW_ID")
        parser.add_argument("-o", "--output", metavar="FILE", required=True, help="Where to write the zip.")

    def handle(self, *args: Any, preview_id: str, output: str, **options: Any) -> None:
        try:
            preview = Preview.objects.select_related("actor").get(pk=preview_id)
        except (Preview.DoesNotExist, ValidationError) as missing:
            raise CommandError(f"No preview {preview_id}.") from missing
        try:
            bundle = evidence_bundle(preview)
        except EvidenceNotSealed as waiting:
            raise CommandError(str(waiting)) from waiting
        try:
            Path(output).write_bytes(bundle.content)
        except OSError as error:
            raise CommandError(f"Can't write {output}: {error}") from error
        self.stdout.write(
            f"Wrote {output}: {bundle.records} audit records of preview {preview.pk}, proven against the "
            f"log's checkpoint of {bundle.tree_size} records."
        )
