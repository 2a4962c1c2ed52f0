from django.core.management.base import BaseCommand

from approvals.audit_chain import audit_chain_verify
from approvals.models import AuditChainHead, AuditRecord


class Command(BaseCommand):
    help = "Check the audit log's hash chain; exits non-zero at the first broken link."

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        head = AuditChainHead.objects.filter(pk=1).first()
        records = AuditRecord.objects.order_by("sequence").iterator(chunk_size=2000)
        problem = audit_chain_verify(records, head_sequence=head.sequence if head else None)
        if problem is not None:
            where = f"record #{problem.sequence}" + (f" (id {problem.record_id})" if problem.record_id else "")
            self.stderr.write(f"Audit chain broken at {where}: {problem.problem}.")
            raise SystemExit(1)
        count = head.sequence if head else 0
        self.stdout.write(self.style.SUCCESS(f"Audit chain intact: {count} records."))
