"""Invoices are read-only in the admin: they change through `import_shop_data` (which bumps
their version, so an approved send of an older version is refused), and a standing approval is
a staff decision that must be audited, which the admin would not do."""

from django.contrib import admin

from approvals.plugin import ReadOnlyInline, ReadOnlyModelAdmin

from .models import Delivery, Invoice, InvoiceContact, InvoiceLine, StandingApproval


class InvoiceLineInline(ReadOnlyInline):
    model = InvoiceLine
    show_change_link = False


class InvoiceContactInline(ReadOnlyInline):
    model = InvoiceContact
    show_change_link = False


@admin.register(Invoice)
class InvoiceAdmin(ReadOnlyModelAdmin):
    list_display = ("number", "customer", "status", "currency", "total_minor", "version")
    list_filter = ("status", "currency")
    search_fields = ("number", "customer__username")
    list_select_related = ("customer",)
    inlines = [InvoiceLineInline, InvoiceContactInline]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyModelAdmin):
    """The invoice ledger: what was handed to the mail server, one row per executed send."""

    list_display = ("invoice", "subject", "message_id", "sent_at")
    list_select_related = ("invoice",)
    search_fields = ("invoice__number", "message_id")


@admin.register(StandingApproval)
class StandingApprovalAdmin(ReadOnlyModelAdmin):
    list_display = ("invoice", "recipient", "approved_by", "created_at", "consumed_at")
    list_select_related = ("invoice", "approved_by")
    search_fields = ("invoice__number", "recipient")
