"""Orders and the refund ledger are read-only in the admin: an order changes through
`import_shop_data` (which bumps its version) and refunds only through an approved preview."""

from django.contrib import admin

from approvals.plugin import ReadOnlyInline, ReadOnlyModelAdmin

from .models import Drift, LocalGatewayRefund, Order, ProviderEvent, Refund


class RefundInline(ReadOnlyInline):
    model = Refund
    fields = (
        "amount_minor",
        "currency",
        "reason",
        "gateway_refund_id",
        "status",
        "status_reason",
        "preview",
        "created_at",
    )


@admin.register(Order)
class OrderAdmin(ReadOnlyModelAdmin):
    list_display = ("number", "customer", "status", "currency", "total_minor", "refunded_minor", "version")
    list_filter = ("status", "currency")
    search_fields = ("number", "customer__username", "payment_ref")
    list_select_related = ("customer",)
    inlines = [RefundInline]


@admin.register(Refund)
class RefundAdmin(ReadOnlyModelAdmin):
    list_display = ("gateway_refund_id", "order", "amount_minor", "currency", "reason", "status", "created_at")
    list_filter = ("currency", "reason", "status")
    search_fields = ("gateway_refund_id", "order__number", "=preview__id")
    list_select_related = ("order",)


@admin.register(LocalGatewayRefund)
class LocalGatewayRefundAdmin(ReadOnlyModelAdmin):
    list_display = ("refund_id", "idempotency_key", "payment_ref", "amount_minor", "currency", "status", "created_at")
    search_fields = ("refund_id", "idempotency_key", "payment_ref")


@admin.register(ProviderEvent)
class ProviderEventAdmin(ReadOnlyModelAdmin):
    list_display = ("event_id", "provider", "type", "object_id", "result", "received_at")
    list_filter = ("provider", "type", "result")
    search_fields = ("event_id", "object_id")


@admin.register(Drift)
class DriftAdmin(ReadOnlyModelAdmin):
    list_display = ("order", "kind", "reference", "last_seen_at", "cleared_at", "acknowledged_at")
    list_filter = ("kind",)
    search_fields = ("order__number", "reference")
