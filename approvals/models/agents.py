"""What agents hold and leave: sessions, idempotency keys, tallies of rejected calls, webhook deliveries."""

from django.conf import settings
from django.db import models


class AgentSession(models.Model):
    """A bearer token bound to one person; the agent acts as that person and no other."""

    token_hash = models.CharField(max_length=64, unique=True)
    token_prefix = models.CharField(max_length=16, help_text="First characters, to recognise a token.")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agent_sessions")
    tools = models.JSONField(default=list)
    label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    # When its token last authenticated, to the minute (approvals.core.services.sessions.agent_session_used).
    last_used_at = models.DateTimeField(null=True, blank=True)
    # A CharField: approvals.agents.webhooks.webhook_url_check is what decides which URLs are taken.
    webhook_url = models.CharField(
        max_length=2000, blank=True, help_text="Where each preview transition is posted (Standard Webhooks)."
    )
    webhook_secret = models.CharField(
        max_length=100, blank=True, help_text="The signing secret (whsec_…), shown once when the session is minted."
    )

    # A session a customer granted to a remote MCP client through OAuth (approvals.agents.oauth): the
    # client, the authorization code until it is exchanged, then the family of rotating refresh tokens,
    # whose access tokens act as this session. Its own bearer token is never shown to anyone.
    oauth_application = models.ForeignKey(
        "oauth2_provider.Application", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    oauth_grant = models.OneToOneField(
        "oauth2_provider.Grant", on_delete=models.SET_NULL, null=True, blank=True, related_name="agent_session"
    )
    oauth_token_family = models.UUIDField(null=True, blank=True, unique=True)

    def __str__(self) -> str:
        return f"{self.token_prefix}… for {self.user}"


class IdempotencyRecord(models.Model):
    """The stored answer to a tool call sent with an Idempotency-Key, per agent session."""

    # Indexed by the unique (agent_session, key) below, which also serves lookups by session alone.
    agent_session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+", db_index=False)
    key = models.CharField(max_length=255)
    request_fingerprint = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent_session", "key"], name="one_answer_per_key"),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.response_status})"


class RejectedCallKind(models.TextChoices):
    THROTTLED = "throttled", "Throttled (429)"
    MALFORMED = "malformed", "Malformed or refused before the policy (400, 403, 404, 409)"


class RejectedCallTally(models.Model):
    """Tool calls refused before any policy ran, counted per agent session, minute and kind.

    One row per (session, minute, kind) whatever the number of calls, so a flood shows (the count)
    without filling the append-only audit log; the first calls of each minute are also audited in full.
    """

    agent_session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+", db_index=False)
    minute = models.DateTimeField(help_text="The minute the calls were made in (seconds cut off).")
    kind = models.CharField(max_length=16, choices=RejectedCallKind.choices)
    count = models.PositiveIntegerField(default=1)
    last_arguments_sha256 = models.CharField(max_length=64, help_text="SHA-256 of the last call's body.")
    last_arguments_sample = models.CharField(max_length=200, blank=True, help_text="Its first characters.")
    last_code = models.CharField(max_length=64, blank=True, help_text="The error code the last call got.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent_session", "minute", "kind"], name="one_tally_per_session_minute"),
        ]

    def __str__(self) -> str:
        return f"{self.count} {self.kind} calls at {self.minute:%Y-%m-%d %H:%M}"


class WebhookDeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed (gave up)"


class WebhookDelivery(models.Model):
    """One Standard Webhooks message to an agent session's webhook: a preview transition, its attempts."""

    agent_session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="webhook_deliveries")
    preview = models.ForeignKey("approvals.Preview", on_delete=models.CASCADE, related_name="+", null=True, blank=True)
    message_id = models.CharField(max_length=64, unique=True, help_text="The webhook-id header.")
    event_type = models.CharField(max_length=64)
    url = models.CharField(max_length=2000)
    payload = models.JSONField()
    status = models.CharField(
        max_length=16, choices=WebhookDeliveryStatus.choices, default=WebhookDeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["agent_session", "created_at"], name="webhook_delivery_session_idx"),
            models.Index(fields=["status", "next_attempt_at"], name="webhook_delivery_due_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} to {self.url} ({self.status})"
