from django.conf import settings
from django.db import models
from django.db.models import F, Q


class OrderStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SHIPPED = "shipped", "Shipped"
    DELIVERED = "delivered", "Delivered"
    CANCELLED = "cancelled", "Cancelled"


class Order(models.Model):
    number = models.CharField(max_length=64, unique=True, help_text="The shop's order id, e.g. o-12.")
    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="orders")
    currency = models.CharField(max_length=3)
    total_minor = models.BigIntegerField()
    refunded_minor = models.BigIntegerField(default=0)
    status = models.CharField(max_length=16, choices=OrderStatus.choices)
    placed_at = models.DateField()
    delivered_at = models.DateField(null=True, blank=True)
    payment_ref = models.CharField(max_length=255, blank=True)
    version = models.PositiveIntegerField(default=1, help_text="Incremented on every change.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-placed_at", "number"]
        constraints = [
            models.CheckConstraint(condition=Q(total_minor__gte=0), name="order_total_not_negative"),
            models.CheckConstraint(condition=Q(refunded_minor__gte=0), name="order_refunded_not_negative"),
            models.CheckConstraint(
                condition=Q(refunded_minor__lte=F("total_minor")), name="order_refunded_within_total"
            ),
            models.CheckConstraint(
                condition=~Q(status="delivered") | Q(delivered_at__isnull=False),
                name="order_delivered_has_date",
            ),
        ]
        # refund_order's review permission (refunds.permissions.REVIEW_REFUNDS, Action.review_permission).
        permissions = [("review_refund_order", "Can approve, reject and retry refund previews")]

    def __str__(self) -> str:
        return self.number

    @property
    def remaining_minor(self) -> int:
        return self.total_minor - self.refunded_minor

    @property
    def delivery_days(self) -> int | None:
        if self.delivered_at is None:
            return None
        return (self.delivered_at - self.placed_at).days


class RefundStatus(models.TextChoices):
    """Where the money of a refund is, as the provider last reported it (docs/payments.md).

    `pending` is processing at the bank (Stripe's `pending` and `requires_action`): it stays counted in
    the order's refunded amount. `failed` and `canceled` are final and moved no money: the order's
    refunded amount no longer counts them.
    """

    PENDING = "pending", "Processing at the bank"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed at the bank"
    CANCELED = "canceled", "Cancelled"


# A refund in one of these moved no money and never will.
DEAD_REFUND_STATUSES = (RefundStatus.FAILED, RefundStatus.CANCELED)
# The changes a provider event may make; anything else is out of order and changes nothing.
REFUND_STATUS_MOVES = {
    RefundStatus.PENDING: {RefundStatus.SUCCEEDED, RefundStatus.FAILED, RefundStatus.CANCELED},
    # Some payment methods fail a refund after it first succeeded (Stripe sends refund.failed).
    RefundStatus.SUCCEEDED: {RefundStatus.FAILED},
    RefundStatus.FAILED: set(),
    RefundStatus.CANCELED: set(),
}


class Refund(models.Model):
    """The ledger: one row per executed refund preview, with the provider's status of its money."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="refunds")
    preview = models.OneToOneField("approvals.Preview", on_delete=models.PROTECT, related_name="refund")
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.CharField(max_length=32)
    gateway_refund_id = models.CharField(max_length=255, unique=True)
    status = models.CharField(max_length=16, choices=RefundStatus.choices, default=RefundStatus.SUCCEEDED)
    status_reason = models.CharField(
        max_length=255, blank=True, help_text="The provider's pending_reason or failure_reason, as it sent it."
    )
    status_changed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount_minor__gt=0), name="refund_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.amount_minor} {self.currency} on {self.order_id}"

    @property
    def is_dead(self) -> bool:
        return self.status in DEAD_REFUND_STATUSES


class LocalGatewayRefund(models.Model):
    """The local payment gateway's own records, keyed like a provider's idempotency keys."""

    idempotency_key = models.CharField(max_length=255, unique=True)
    refund_id = models.CharField(max_length=64, unique=True)
    payment_ref = models.CharField(max_length=255)
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=16, choices=RefundStatus.choices, default=RefundStatus.SUCCEEDED)
    status_reason = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.refund_id


class ProviderEvent(models.Model):
    """One event from the payment provider (a Stripe webhook, or the local gateway's equivalent),
    stored before it is applied. The unique (provider, event id) makes a second delivery a no-op."""

    provider = models.CharField(max_length=16)
    event_id = models.CharField(max_length=255)
    type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=255, blank=True, help_text="The refund (or charge) it is about.")
    provider_created_at = models.DateTimeField(null=True, blank=True)
    payload = models.JSONField()
    result = models.CharField(max_length=32, blank=True, help_text="What applying it did (docs/payments.md).")
    detail = models.JSONField(default=dict)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["received_at"]
        constraints = [
            models.UniqueConstraint(fields=["provider", "event_id"], name="provider_event_once"),
        ]
        indexes = [models.Index(fields=["object_id"], name="provider_event_object_idx")]

    def __str__(self) -> str:
        return f"{self.provider} {self.type} {self.event_id}"


class DriftKind(models.TextChoices):
    PROVIDER_REFUND_WITHOUT_PREVIEW = "provider_refund_without_preview", "Provider refund with no preview"
    PREVIEW_WITHOUT_PROVIDER_REFUND = "preview_without_provider_refund", "Preview with no provider refund"
    AMOUNT_MISMATCH = "amount_mismatch", "Amount mismatch"
    STATUS_MISMATCH = "status_mismatch", "Status mismatch"
    REFUNDED_TOTAL_MISMATCH = "refunded_total_mismatch", "Refunded total disagrees"


class Drift(models.Model):
    """A disagreement between the gateway's records and the provider's, found by `manage.py reconcile`.

    Nothing repairs it by itself. A person acknowledges it with a note (audited). The fingerprint covers
    the kind, the order, the refund or preview and the amounts, so a drift whose numbers change is a
    new drift that needs a new acknowledgement. A later run that no longer finds it marks it cleared.
    """

    fingerprint = models.CharField(max_length=64, unique=True)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="drifts")
    kind = models.CharField(max_length=40, choices=DriftKind.choices)
    reference = models.CharField(max_length=255, blank=True, help_text="The refund or preview it is about.")
    message = models.TextField()
    facts = models.JSONField(default=dict)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    acknowledgement_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-last_seen_at", "id"]
        indexes = [models.Index(fields=["cleared_at", "acknowledged_at"], name="drift_open_idx")]

    def __str__(self) -> str:
        return f"{self.kind} on {self.order_id}"

    @property
    def is_open(self) -> bool:
        return self.cleared_at is None and self.acknowledged_at is None
