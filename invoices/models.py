from django.conf import settings
from django.db import models
from django.db.models import Q


class InvoiceStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    ISSUED = "issued", "Issued"
    VOID = "void", "Void"


class Invoice(models.Model):
    number = models.CharField(max_length=64, unique=True, help_text="e.g. INV-17")
    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="invoices")
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=16, choices=InvoiceStatus.choices)
    total_minor = models.BigIntegerField(default=0)
    version = models.PositiveIntegerField(default=1, help_text="Incremented on every change.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["number"]
        constraints = [
            models.CheckConstraint(condition=Q(total_minor__gte=0), name="invoice_total_not_negative"),
        ]
        permissions = [
            ("send_any_invoice", "Can have any invoice sent through their own agent session"),
            # send_invoice's review permission (invoices.permissions.APPROVE_SENDS).
            ("review_send_invoice", "Can approve, reject and retry invoice send previews"),
        ]

    def __str__(self) -> str:
        return self.number


class InvoiceLine(models.Model):
    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    position = models.PositiveIntegerField()
    description = models.CharField(max_length=500)
    quantity = models.PositiveIntegerField()
    unit_minor = models.BigIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "position"], name="one_line_per_position"),
            models.CheckConstraint(condition=Q(unit_minor__gte=0), name="invoice_line_unit_not_negative"),
        ]

    def __str__(self) -> str:
        return self.description

    @property
    def amount_minor(self) -> int:
        return self.quantity * self.unit_minor


class InvoiceContact(models.Model):
    """A billing address the shop knows for this invoice."""

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="contacts")
    email = models.EmailField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["invoice", "email"], name="one_contact_per_email")]

    def __str__(self) -> str:
        return self.email


class StandingApproval(models.Model):
    """Staff's advance yes for one send of one invoice to one exact recipient."""

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="standing_approvals")
    recipient = models.EmailField()
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    consumed_at = models.DateTimeField(null=True, blank=True)
    consumed_by = models.OneToOneField(
        "approvals.Preview", on_delete=models.PROTECT, null=True, blank=True, related_name="standing_approval"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(consumed_at__isnull=True, consumed_by__isnull=True)
                | Q(consumed_at__isnull=False, consumed_by__isnull=False),
                name="standing_approval_consumed_by_one_preview",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.invoice} → {self.recipient}"


class Delivery(models.Model):
    """What was handed to the mail server for one executed send, and its answer. One per preview."""

    preview = models.OneToOneField("approvals.Preview", on_delete=models.PROTECT, related_name="delivery")
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="deliveries")
    invoice_version = models.PositiveIntegerField()
    recipients = models.JSONField(help_text="The envelope recipients the mail server accepted.")
    subject = models.CharField(max_length=300)
    message_id = models.CharField(max_length=300, unique=True)
    content_digest = models.CharField(max_length=64)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["sent_at"]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.invoice} to {', '.join(self.recipients)}"
