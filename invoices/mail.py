"""The only code that sends an invoice email: it sends exactly what a person approved, once."""

from __future__ import annotations

import smtplib
from typing import Any

from django.conf import settings
from django.core.mail import EmailMultiAlternatives

from approvals.plugin import ExecutionFailure, Preview, PreviewStatus, ProviderEvidence, TransientExecutionError

from .models import Delivery, Invoice
from .rendering import invoice_email_render

SEND_INVOICE = "send_invoice"


class InvoiceSendRefused(ExecutionFailure):
    code = "send_refused"


def _message_id(preview: Preview) -> str:
    domain = settings.DEFAULT_FROM_EMAIL.rpartition("@")[2] or "localhost"
    # Stable per preview: a receiving system can recognise a duplicate of the same approved send.
    return f"<invoice-send.{preview.pk}@{domain}>"


def _smtp_answer(error: Exception) -> str:
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        return "; ".join(
            f"{rcpt}: {code} {msg.decode(errors='replace') if isinstance(msg, bytes) else msg}"
            for rcpt, (code, msg) in error.recipients.items()
        )
    if isinstance(error, smtplib.SMTPResponseException):
        text = error.smtp_error.decode(errors="replace") if isinstance(error.smtp_error, bytes) else error.smtp_error
        return f"{error.smtp_code} {text}"
    return f"{type(error).__name__}: {error}"


def _is_transient(error: Exception) -> bool:
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        return all(400 <= code < 500 for code, _msg in error.recipients.values())
    if isinstance(error, smtplib.SMTPResponseException):
        return 400 <= error.smtp_code < 500
    return True  # refused connection, timeout, dropped connection: the server never accepted it


def _may_have_been_accepted(error: Exception) -> bool:
    """An SMTP answer (4xx) or a refused connection proves the message was not taken; a time-out or a
    dropped connection after the data was sent does not."""
    if isinstance(error, smtplib.SMTPResponseException | smtplib.SMTPRecipientsRefused | ConnectionRefusedError):
        return False
    return not isinstance(error, smtplib.SMTPConnectError)


def invoice_email_send(*, preview: Preview, invoice: Invoice) -> dict[str, Any]:
    """Send the approved invoice email. Refuses anything but an approved, unexecuted send_invoice
    preview whose invoice version and rendered content are the ones that were approved."""
    if preview.action != SEND_INVOICE or preview.status != PreviewStatus.APPROVED:
        raise InvoiceSendRefused("Only an approved send_invoice preview can send an invoice.")
    if Delivery.objects.filter(preview=preview).exists():
        raise InvoiceSendRefused("This preview's invoice was already sent.")
    if invoice.number != preview.subject_id or invoice.version != preview.subject_version:
        raise InvoiceSendRefused("The invoice is not the version that was approved.")
    recipient = preview.payload["recipient"]
    rendered = invoice_email_render(invoice=invoice, recipient=recipient)
    if rendered.digest != preview.payload["content_digest"]:
        raise InvoiceSendRefused("The rendered invoice differs from what was approved.", code="content_digest_mismatch")
    message_id = _message_id(preview)
    message = EmailMultiAlternatives(
        subject=rendered.subject,
        body=rendered.text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[recipient],
        headers={"Message-ID": message_id},
    )
    message.attach_alternative(rendered.html, "text/html")
    message.attach(rendered.attachment_name, rendered.attachment, "text/html")
    try:
        message.send(fail_silently=False)
    except (smtplib.SMTPException, OSError) as error:
        answer = _smtp_answer(error)
        if _is_transient(error):
            raise TransientExecutionError(
                f"The mail server did not take the message: {answer}", effect_possible=_may_have_been_accepted(error)
            ) from error
        raise InvoiceSendRefused(f"The mail server refused the message: {answer}", code="mail_refused") from error
    return {
        "invoice_version": invoice.version,
        "recipients": message.recipients(),
        "subject": rendered.subject,
        "message_id": message_id,
        "content_digest": rendered.digest,
    }


def invoice_delivery_record(*, preview: Preview, invoice: Invoice, sent: dict[str, Any]) -> Delivery:
    """Write down what the mail server accepted for this preview (under the executor's locks)."""
    return Delivery.objects.create(
        preview=preview,
        invoice=invoice,
        invoice_version=sent["invoice_version"],
        recipients=sent["recipients"],
        subject=sent["subject"],
        message_id=sent["message_id"],
        content_digest=sent["content_digest"],
    )


def invoice_delivery_evidence(*, preview: Preview) -> ProviderEvidence | None:
    """What the mail server accepted for this preview, for the evidence bundle: the Message-ID (the
    receiving side finds the message by it), the envelope recipients, the subject and the digest of the
    content sent (the names of the execution's effect, compared with it). SMTP sends no events. None
    before anything was sent."""
    delivery = Delivery.objects.filter(preview=preview).first()
    if delivery is None:
        return None
    return ProviderEvidence(
        references={
            "message_id": delivery.message_id,
            "recipients": delivery.recipients,
            "subject": delivery.subject,
            "content_digest": delivery.content_digest,
            "invoice_version": delivery.invoice_version,
            "sent_at": delivery.sent_at.isoformat(),
        }
    )
