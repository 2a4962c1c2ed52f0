"""`send_invoice(invoice_id, recipient)`: a typed control point plugged into the approvals engine."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.utils import timezone

from approvals.plugin import (
    Action,
    ApprovalRole,
    AuditEvent,
    CounterField,
    DisplayRow,
    FactTable,
    PolicyRefusal,
    Preview,
    PreviewOrigin,
    Proposal,
    ProviderEvidence,
    RefusalCode,
    ReviewDocument,
    RiskFlag,
    RuleResult,
    StandingGrant,
    agent_chose,
    amount_of,
    audit_record,
    customer_named,
    format_minor,
)

from .mail import (
    SEND_INVOICE,
    InvoiceSendRefused,
    invoice_delivery_evidence,
    invoice_delivery_record,
    invoice_email_send,
)
from .models import Delivery, Invoice, InvoiceContact, InvoiceStatus, StandingApproval
from .permissions import APPROVE_SENDS, SEND_ANY_INVOICE, STAFF_ROLES, may_approve_sends
from .rendering import invoice_email_render
from .serializers import SendInvoiceArguments


class InvoiceRefusal(RefusalCode):
    """The codes of send_invoice's policy refusals (the agent API's `error.code`)."""

    INVOICE_UNAVAILABLE = "invoice_unavailable"
    INVOICE_NOT_ISSUED = "invoice_not_issued"
    RECIPIENT_INVALID = "recipient_invalid"
    RECIPIENT_NOT_KNOWN_CONTACT = "recipient_not_known_contact"


def recipient_problem(recipient: str) -> str | None:
    if any(ch.isspace() or ch in ",;<>\"'" for ch in recipient) or not recipient.isprintable():
        return "must be one bare address, without names, spaces, separators or line breaks"
    try:
        validate_email(recipient)
    except ValidationError:
        return "is not a valid email address"
    return None


def send_invoice_policy_check(*, invoice: Invoice, recipient: str) -> None:
    if invoice.status != InvoiceStatus.ISSUED:
        raise PolicyRefusal(
            f"Invoice {invoice.number} is {invoice.status}; only issued invoices can be sent.",
            code=InvoiceRefusal.INVOICE_NOT_ISSUED,
            invoice_status=invoice.status,
        )
    problem = recipient_problem(recipient)
    if problem is not None:
        raise PolicyRefusal(f"The recipient {recipient!r} {problem}.", code=InvoiceRefusal.RECIPIENT_INVALID)


class SendInvoiceAction(Action):
    name = SEND_INVOICE
    subject_argument = "invoice_id"
    description = (
        "Propose sending one issued invoice by email to exactly one recipient address. "
        "Nothing is sent by this call: the send happens only once staff approved this exact "
        "invoice and recipient (or a standing approval for that exact pair exists), and the "
        "result says whether it was sent. Report that status, not your own conclusion."
    )
    arguments_serializer = SendInvoiceArguments
    subject_model = Invoice
    subject_type = "invoice"
    subject_id_field = "number"
    subject_owner_field = "customer"
    subject_unavailable_code = InvoiceRefusal.INVOICE_UNAVAILABLE
    # The same words whether the invoice belongs to someone else or does not exist.
    subject_unavailable_message = "Invoice {subject_id} is not available: no such invoice may be sent by you."
    # The invoice's total is shown (and counted by REVIEW_QUORUM); it is not money going out.
    proposes_amount = True
    effect_performer = "the mail server"
    # SMTP has no idempotency key: the engine sends under the preview's lock, one run at a time.
    idempotent_effect = False
    review_permission = APPROVE_SENDS
    staff_roles = STAFF_ROLES
    searchable_payload_fields = ("recipient",)

    def may_use(self, user: Any) -> bool:
        return bool(user.is_active) and (not user.is_staff or user.has_perm(SEND_ANY_INVOICE))

    def subject_queryset(self, actor: Any) -> Any:
        # Billing staff may have any invoice sent through their own session; everyone else only their own.
        if actor.has_perm(SEND_ANY_INVOICE):
            return Invoice.objects.all()
        return super().subject_queryset(actor)

    def propose(self, *, actor: Any, arguments: dict[str, Any]) -> Proposal:
        recipient = arguments["recipient"]
        invoice: Invoice = self.proposal_subject(actor=actor, subject_id=arguments["invoice_id"])
        send_invoice_policy_check(invoice=invoice, recipient=recipient)
        rendered = invoice_email_render(invoice=invoice, recipient=recipient)
        return Proposal(
            subject_type=self.subject_type,
            subject_id=invoice.number,
            subject_version=invoice.version,
            payload={
                "invoice_id": invoice.number,
                "recipient": recipient,
                "subject": rendered.subject,
                "content_digest": rendered.digest,
            },
            amount_minor=invoice.total_minor,
            currency=invoice.currency,
            required_approvals=[ApprovalRole.STAFF.value],
        )

    def claim_standing_grant(self, preview: Preview) -> StandingGrant | None:
        candidates = (
            StandingApproval.objects.select_for_update(of=("self",))
            .select_related("approved_by")
            .filter(
                invoice__number=preview.subject_id,
                recipient=preview.payload["recipient"],
                consumed_at__isnull=True,
            )
            .exclude(approved_by=preview.actor_id)
            .order_by("pk")
        )
        for standing in candidates:
            approver = standing.approved_by
            facts = {
                "standing_approval": standing.pk,
                "recipient": standing.recipient,
                "approved_by": approver.get_username(),
            }
            # Checked at use as well as at import: the approver may have left or lost the role since.
            if not may_approve_sends(approver):
                audit_record(
                    event=AuditEvent.STANDING_APPROVAL_REFUSED,
                    preview=preview,
                    result={**facts, "reason": "the approver is no longer an active invoice approver"},
                )
                continue
            standing.consumed_at = timezone.now()
            standing.consumed_by = preview
            standing.save(update_fields=["consumed_at", "consumed_by"])
            audit_record(event=AuditEvent.STANDING_APPROVAL_USED, preview=preview, actor=approver, result=facts)
            return StandingGrant(
                role=ApprovalRole.STAFF,
                approver=approver,
                basis=f"standing approval #{standing.pk} for {preview.subject_id} to "
                f"{standing.recipient} by {approver.get_username()}",
            )
        return None

    def revalidate(self, *, preview: Preview, subject: Any) -> None:
        send_invoice_policy_check(invoice=subject, recipient=preview.payload["recipient"])

    def perform(self, *, preview: Preview, subject: Any = None) -> dict[str, Any]:
        invoice = Invoice.objects.filter(number=preview.subject_id).first()
        if invoice is None:
            raise InvoiceSendRefused(f"Invoice {preview.subject_id} no longer exists.", code="subject_unavailable")
        return invoice_email_send(preview=preview, invoice=invoice)

    def effect_reference(self, effect: dict[str, Any] | None) -> str:
        if effect and effect.get("message_id"):
            return f"message id {effect['message_id']}"
        return "no reference"

    def provider_evidence(self, preview: Preview) -> ProviderEvidence | None:
        return invoice_delivery_evidence(preview=preview)

    def record(self, *, preview: Preview, subject: Any, effect: dict[str, Any]) -> dict[str, Any]:
        delivery = invoice_delivery_record(preview=preview, invoice=subject, sent=effect)
        return {
            "delivery_id": delivery.pk,
            "invoice_id": subject.number,
            "recipients": delivery.recipients,
            "subject": delivery.subject,
            "message_id": delivery.message_id,
            "content_digest": delivery.content_digest,
        }

    def headline(self, preview: Preview) -> str:
        return f"Send invoice {preview.subject_id} to {preview.payload['recipient']}"

    def review_summary(self, preview: Preview) -> str:
        recipient = preview.payload["recipient"]
        # Staff chose a known contact (a counter-proposal); otherwise the agent chose the address.
        to = recipient if preview.origin != PreviewOrigin.AGENT else agent_chose(recipient)
        return f"Send invoice {preview.subject_id} to {to} for {customer_named(preview.actor.get_username())}"

    def display_rows(self, preview: Preview) -> list[DisplayRow]:
        return [
            DisplayRow("Invoice", preview.subject_id),
            DisplayRow("Recipient", preview.payload["recipient"]),
            DisplayRow("Total", format_minor(*amount_of(preview))),
            DisplayRow("Subject", preview.payload["subject"]),
        ]

    def consequence(self, preview: Preview) -> str:
        return (
            f"Invoice {preview.subject_id} is emailed to {preview.payload['recipient']} exactly as shown. "
            "An email cannot be recalled once the mail server accepts it."
        )

    def preview_fields(self, preview: Preview) -> dict[str, Any]:
        return {
            "invoice_id": preview.payload["invoice_id"],
            "recipient": preview.payload["recipient"],
            "amount_minor": preview.amount_minor,
            "currency": preview.currency,
        }

    def outcome_text(self, preview: Preview) -> str:
        result = preview.result or {}
        return (
            f"Invoice {preview.subject_id} was accepted by the mail server for "
            f"{', '.join(result.get('recipients', []))} (message id {result.get('message_id', '')})."
        )

    def review_document(self, preview: Preview) -> ReviewDocument | None:
        invoice = Invoice.objects.filter(number=preview.subject_id).first()
        if invoice is None:
            return None
        rendered = invoice_email_render(invoice=invoice, recipient=preview.payload["recipient"])
        return ReviewDocument(
            title="The email exactly as it will be sent",
            recipients=[preview.payload["recipient"]],
            subject=rendered.subject,
            html=rendered.html,
            text=rendered.text,
            attachment_name=rendered.attachment_name,
            attachment_html=rendered.attachment,
            matches_preview=(
                invoice.version == preview.subject_version and rendered.digest == preview.payload["content_digest"]
            ),
        )

    def review_facts(self, preview: Preview) -> list[DisplayRow]:
        invoice = Invoice.objects.select_related("customer").filter(number=preview.subject_id).first()
        if invoice is None:
            return [DisplayRow("Invoice", f"{preview.subject_id} no longer exists")]
        contacts = sorted(invoice.contacts.values_list("email", flat=True))
        recipient = preview.payload["recipient"]
        known = "a known billing contact" if recipient in contacts else "NOT a known billing contact"
        return [
            DisplayRow("Invoice", invoice.number),
            DisplayRow("Customer", f"{invoice.customer.get_username()} ({invoice.customer.email or 'no email'})"),
            DisplayRow("Status", invoice.get_status_display()),
            DisplayRow("Total", format_minor(invoice.total_minor, invoice.currency)),
            DisplayRow("Known billing contacts", ", ".join(contacts) or "none"),
            DisplayRow(
                "Recipient",
                f"{recipient} ({known})",
            ),
            DisplayRow("Invoice version", f"{invoice.version} now, {preview.subject_version} when proposed"),
        ]

    def policy_evaluation(self, preview: Preview) -> list[RuleResult]:
        invoice = Invoice.objects.filter(number=preview.subject_id).first()
        may_send = invoice is not None and self.subject_queryset(preview.actor).filter(pk=invoice.pk).exists()
        problem = recipient_problem(preview.payload["recipient"])
        return [
            RuleResult(
                "1. The proposer may send this invoice",
                may_send,
                f"{preview.actor.get_username()} {'may' if may_send else 'may not'} send {preview.subject_id}.",
            ),
            RuleResult(
                "2. The invoice is issued",
                invoice is not None and invoice.status == InvoiceStatus.ISSUED,
                f"Status is {invoice.status if invoice else 'missing'}; only issued invoices are sent.",
            ),
            RuleResult(
                "3. The recipient is one valid address",
                problem is None,
                f"{preview.payload['recipient']} {problem or 'is a valid address'}.",
            ),
            RuleResult(
                "Invoice unchanged since the preview",
                invoice is not None and invoice.version == preview.subject_version,
                f"Version {invoice.version if invoice else '-'} now, {preview.subject_version} when proposed.",
            ),
        ]

    def review_tables(self, preview: Preview) -> list[FactTable]:
        deliveries = Delivery.objects.filter(invoice__number=preview.subject_id).order_by("sent_at")
        standing = StandingApproval.objects.filter(invoice__number=preview.subject_id).select_related("approved_by")
        return [
            FactTable(
                caption=f"Earlier sends of {preview.subject_id}",
                columns=["Sent", "To", "Subject", "Message id"],
                rows=[
                    [d.sent_at.strftime("%d %b %Y %H:%M"), ", ".join(d.recipients), d.subject, d.message_id]
                    for d in deliveries
                ],
                empty="This invoice has not been sent before.",
            ),
            FactTable(
                caption=f"Standing approvals for {preview.subject_id}",
                columns=["Recipient", "Approved by", "Used"],
                rows=[
                    [
                        a.recipient,
                        a.approved_by.get_username(),
                        a.consumed_at.strftime("%d %b %Y %H:%M") if a.consumed_at else "not yet",
                    ]
                    for a in standing
                ],
                empty="None recorded.",
            ),
        ]

    def risk_flags_many(self, previews: list[Preview]) -> dict[Any, list[RiskFlag]]:
        known = set(
            InvoiceContact.objects.filter(invoice__number__in={p.subject_id for p in previews}).values_list(
                "invoice__number", "email"
            )
        )
        return {
            p.pk: []
            if (p.subject_id, p.payload["recipient"]) in known
            else [RiskFlag("unknown_recipient", f"{p.payload['recipient']} is not a known billing contact")]
            for p in previews
        }

    def counter_fields(self, preview: Preview) -> list[CounterField]:
        contacts = sorted(
            InvoiceContact.objects.filter(invoice__number=preview.subject_id).values_list("email", flat=True)
        )
        return [
            CounterField(
                name="recipient",
                label="Send to (a known billing contact)",
                current=preview.payload["recipient"],
                choices=[c for c in contacts if c != preview.payload["recipient"]],
                hint="Only the invoice's known billing contacts can be chosen.",
            )
        ]

    def counter_arguments(self, preview: Preview, values: dict[str, str]) -> dict[str, Any]:
        recipient = values.get("recipient", "").strip()
        if not InvoiceContact.objects.filter(invoice__number=preview.subject_id, email=recipient).exists():
            raise PolicyRefusal(
                f"{recipient or 'That address'} is not a known billing contact of invoice {preview.subject_id}; "
                "a counter-proposal may only send to one.",
                code=InvoiceRefusal.RECIPIENT_NOT_KNOWN_CONTACT,
            )
        return {"invoice_id": preview.subject_id, "recipient": recipient}

    def counter_words(self, preview: Preview, arguments: dict[str, Any]) -> str:
        return (
            f"sending invoice {preview.subject_id} to its billing contact {arguments['recipient']} "
            f"instead of {preview.payload['recipient']}"
        )
