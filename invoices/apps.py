from django.apps import AppConfig


class InvoicesConfig(AppConfig):
    name = "invoices"

    def ready(self) -> None:
        from approvals.plugin import ImportSection, registry

        from .actions import SendInvoiceAction
        from .serializers import InvoiceImportSerializer, StandingApprovalImportSerializer
        from .services import (
            invoice_describe,
            invoice_record,
            invoice_upsert,
            standing_approval_describe,
            standing_approval_upsert,
        )

        registry.register_action(SendInvoiceAction())
        registry.register_import_section(
            ImportSection(
                key="invoices",
                item_serializer=InvoiceImportSerializer,
                write=invoice_upsert,
                order=30,
                subject_type="invoice",
                describe=invoice_describe,
                key_field="number",
                record=invoice_record,
            )
        )
        registry.register_import_section(
            ImportSection(
                key="standing_approvals",
                item_serializer=StandingApprovalImportSerializer,
                write=standing_approval_upsert,
                order=40,
                subject_type="invoice",
                describe=standing_approval_describe,
                audit_event="standing_approval_granted",
            )
        )
