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


class Refund(models.Model):
    """The ledger: one row per executed refund preview."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="refunds")
    preview = models.OneToOneField("approvals.Preview", on_delete=models.PROTECT, related_name="refund")
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.CharField(max_length=32)
    gateway_refund_id = models.CharField(max_length=255, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount_minor__gt=0), name="refund_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.amount_minor} {self.currency} on {self.order_id}"


class LocalGatewayRefund(models.Model):
    """The local payment gateway's own records, keyed like a provider's idempotency keys."""

    idempotency_key = models.CharField(max_length=255, unique=True)
    refund_id = models.CharField(max_length=64, unique=True)
    payment_ref = models.CharField(max_length=255)
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.refund_id
