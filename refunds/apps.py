from django.apps import AppConfig


class RefundsConfig(AppConfig):
    name = "refunds"

    def ready(self) -> None:
        from approvals.plugin import ImportSection, registry

        from . import checks  # noqa: F401 - registers the system check
        from .actions import RefundOrderAction
        from .serializers import OrderImportSerializer
        from .services import order_describe, order_record, order_upsert

        registry.register_action(RefundOrderAction())
        registry.register_import_section(
            ImportSection(
                key="orders",
                item_serializer=OrderImportSerializer,
                write=order_upsert,
                order=20,
                subject_type="order",
                describe=order_describe,
                key_field="id",
                record=order_record,
            )
        )
