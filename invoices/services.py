"""Write services for invoices (their sends come with the send_invoice action)."""

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import F

from .models import Invoice, InvoiceContact, InvoiceLine, StandingApproval


def _snapshot(invoice: Invoice) -> tuple[Any, ...]:
    lines = tuple(invoice.lines.values_list("description", "quantity", "unit_minor"))
    contacts = tuple(sorted(invoice.contacts.values_list("email", flat=True)))
    return (invoice.customer_id, invoice.currency, invoice.status, lines, contacts)


def invoice_upsert(data: dict[str, Any]) -> str:
    """Create or update one invoice with its lines and contacts; bump the version on a change."""
    customer = get_user_model().objects.get(username=data["customer"])
    lines = [(line["description"], line["quantity"], line["unit_minor"]) for line in data["lines"]]
    contacts = sorted(set(data["contacts"]))
    wanted = (customer.pk, data["currency"], data["status"], tuple(lines), tuple(contacts))
    invoice = Invoice.objects.select_for_update().filter(number=data["number"]).first()
    outcome = "created"
    if invoice is None:
        invoice = Invoice.objects.create(
            number=data["number"], customer=customer, currency=data["currency"], status=data["status"]
        )
    elif _snapshot(invoice) == wanted:
        return "unchanged"
    else:
        outcome = "updated"
        invoice.customer = customer
        invoice.currency = data["currency"]
        invoice.status = data["status"]
        invoice.version = F("version") + 1
    invoice.total_minor = sum(quantity * unit for _, quantity, unit in lines)
    invoice.save()
    invoice.lines.all().delete()
    InvoiceLine.objects.bulk_create(
        InvoiceLine(invoice=invoice, position=i, description=d, quantity=q, unit_minor=u)
        for i, (d, q, u) in enumerate(lines, start=1)
    )
    invoice.contacts.all().delete()
    InvoiceContact.objects.bulk_create(InvoiceContact(invoice=invoice, email=email) for email in contacts)
    return outcome


def standing_approval_upsert(data: dict[str, Any]) -> str:
    """Record staff's advance approval of one send to the exact pair, unless an unused one exists."""
    invoice = Invoice.objects.get(number=data["invoice"])
    if StandingApproval.objects.filter(invoice=invoice, recipient=data["recipient"], consumed_at__isnull=True).exists():
        return "unchanged"
    approver = get_user_model().objects.get(username=data["approved_by"])
    StandingApproval.objects.create(invoice=invoice, recipient=data["recipient"], approved_by=approver)
    return "created"


def invoice_record(number: str, lock: bool) -> dict[str, Any] | None:
    """The invoice as stored, in the import's item format, with its version (the shop data API's GET and
    If-Match); `lock` takes the invoice's row lock first, as invoice_upsert does, in the caller's transaction."""
    invoices = Invoice.objects.select_for_update() if lock else Invoice.objects.all()
    invoice = invoices.filter(number=number).first()
    if invoice is None:
        return None
    return {
        "number": invoice.number,
        "customer": get_user_model().objects.values_list("username", flat=True).get(pk=invoice.customer_id),
        "currency": invoice.currency,
        "status": invoice.status,
        "contacts": sorted(invoice.contacts.values_list("email", flat=True)),
        "lines": [
            {"description": description, "quantity": quantity, "unit_minor": unit_minor}
            for description, quantity, unit_minor in invoice.lines.order_by("position").values_list(
                "description", "quantity", "unit_minor"
            )
        ],
        "version": invoice.version,
    }


def invoice_describe(data: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """An invoice as stored, for the import's audit."""
    invoice = Invoice.objects.select_related("customer").filter(number=data["number"]).first()
    if invoice is None:
        return data["number"], None
    return invoice.number, {
        "customer": invoice.customer.get_username(),
        "currency": invoice.currency,
        "status": invoice.status,
        "total_minor": invoice.total_minor,
        "lines": [list(line) for line in invoice.lines.values_list("description", "quantity", "unit_minor")],
        "contacts": sorted(invoice.contacts.values_list("email", flat=True)),
        "version": invoice.version,
    }


def standing_approval_describe(data: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The unused standing approvals for the pair, for the import's audit of a grant."""
    unused = (
        StandingApproval.objects.filter(
            invoice__number=data["invoice"], recipient=data["recipient"], consumed_at__isnull=True
        )
        .select_related("approved_by")
        .order_by("pk")
    )
    return data["invoice"], {
        "recipient": data["recipient"],
        "unused_standing_approvals": [
            {"id": standing.pk, "approved_by": standing.approved_by.get_username()} for standing in unused
        ],
    }
