"""The invoice email, rendered from templates and the invoice alone, so the same version
always renders the same bytes, and the digest a reviewer approved can be checked before sending."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.template.loader import render_to_string

from approvals.plugin import digest_of, format_minor

from .models import Invoice


@dataclass(frozen=True)
class RenderedInvoiceEmail:
    subject: str
    text: str
    html: str
    attachment_name: str
    attachment: str

    @property
    def digest(self) -> str:
        return digest_of(
            {
                "subject": self.subject,
                "text": self.text,
                "html": self.html,
                "attachment_name": self.attachment_name,
                "attachment": self.attachment,
            }
        )


def _plain_text(rendered: str) -> str:
    """render_to_string marks its output safe for HTML; a text template (autoescape off) holds the
    invoice's imported text unescaped, so it must not keep that mark, or a page showing it would not
    escape it. Joining makes a plain str of the same characters."""
    return "".join([rendered])


def invoice_email_render(*, invoice: Invoice, recipient: str) -> RenderedInvoiceEmail:
    lines = [
        {
            "description": line.description,
            "quantity": line.quantity,
            "unit": format_minor(line.unit_minor, invoice.currency),
            "amount": format_minor(line.amount_minor, invoice.currency),
        }
        for line in invoice.lines.all()
    ]
    context = {
        "invoice": invoice,
        "lines": lines,
        "total": format_minor(invoice.total_minor, invoice.currency),
        "recipient": recipient,
        "shop_name": settings.SHOP_NAME,
    }
    subject = _plain_text(" ".join(render_to_string("invoices/email_subject.txt", context).split()))
    return RenderedInvoiceEmail(
        subject=subject,
        text=_plain_text(render_to_string("invoices/email_body.txt", context)),
        html=render_to_string("invoices/email_body.html", context),
        attachment_name=f"invoice-{invoice.number}.html",
        attachment=render_to_string("invoices/invoice_document.html", context),
    )
