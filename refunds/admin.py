"""Orders and the refund ledger are read-only in the admin: an order changes through
`import_shop_data` (which bumps its version) and refunds only through an approved preview."""

from django.contrib import admin

from approvals.admin import ReadOnlyInline, ReadOnlyModelAdmin

from .models import LocalGatewayRefund, Order, Refund


class RefundInline(ReadOnlyInline):
    model = Refund
    fields = ("amount_minor", "currency", "reason", "gateway_refund_id", "preview", "created_at")


@admin.register(Order)
class OrderAdmin(ReadOnlyModelAdmin):
    list_display = ("number", "customer", "status", "currency", "total_minor", "refunded_minor", "version")
    list_filter = ("status", "currency")
    search_fields = ("number", "customer__username", "payment_ref")
    list_select_related = ("customer",)
    inlines = [RefundInline]


@admin.register(Refund)
class RefundAdmin(ReadOnlyModelAdmin):
    list_display = ("gateway_refund_id", "order", "amount_minor", "currency", "reason", "created_at")
    list_filter = ("currency", "reason")
    search_fields = ("gateway_refund_id", "order__number", "=preview__id")
    list_select_related = ("order",)


@admin.register(LocalGatewayRefund)
class LocalGatewayRefundAdmin(ReadOnlyModelAdmin):
    list_display = ("refund_id", "idempotency_key", "payment_ref", "amount_minor", "currency", "created_at")
    search_fields = ("refund_id", "idempotency_key", "payment_ref")
