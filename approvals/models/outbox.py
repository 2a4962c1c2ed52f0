"""The outbox: a message that must leave the gateway (an agent webhook, a checkpoint's publication, a
notification), written in the transaction that causes it, before anything is handed to the broker."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone


def outbox_message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


class OutboxMessage(models.Model):
    """One message owed. `message_id` is stable (the `webhook-id` of what it sends), so a message handed
    over twice (a broker that lost the acknowledgement, the sweeper) is recognised by its receiver."""

    message_id = models.CharField(max_length=64, unique=True, default=outbox_message_id)
    kind = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["next_attempt_at"], condition=Q(delivered_at__isnull=True), name="outbox_undelivered_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.message_id}"
