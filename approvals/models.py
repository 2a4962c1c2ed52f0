import uuid
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler


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
    # A CharField: approvals.webhooks.webhook_url_check is what decides which URLs are taken.
    webhook_url = models.CharField(
        max_length=2000, blank=True, help_text="Where each preview transition is posted (Standard Webhooks)."
    )
    webhook_secret = models.CharField(
        max_length=100, blank=True, help_text="The signing secret (whsec_…), shown once when the session is minted."
    )

    def __str__(self) -> str:
        return f"{self.token_prefix}… for {self.user}"


class PreviewStatus(models.TextChoices):
    AWAITING_CUSTOMER = "awaiting_customer", "Waiting for the customer"
    AWAITING_STAFF = "awaiting_staff", "Waiting for staff review"
    APPROVED = "approved", "Approved, processing"
    EXECUTED = "executed", "Completed"
    DECLINED = "declined", "Declined by the customer"
    REJECTED = "rejected", "Rejected by staff"
    EXPIRED = "expired", "Expired"
    SUPERSEDED = "superseded", "Superseded"
    FAILED = "failed", "Failed"
    NEEDS_ATTENTION = "needs_attention", "Needs attention"


OPEN_STATUSES = (
    PreviewStatus.AWAITING_CUSTOMER,
    PreviewStatus.AWAITING_STAFF,
    PreviewStatus.APPROVED,
)
AWAITING_STATUSES = (PreviewStatus.AWAITING_CUSTOMER, PreviewStatus.AWAITING_STAFF)
# needs_attention is neither open (no person can approve it) nor terminal (it ends in executed or failed).
TERMINAL_STATUSES = tuple(s for s in PreviewStatus if s not in (*OPEN_STATUSES, PreviewStatus.NEEDS_ATTENTION))


class ApprovalRole(models.TextChoices):
    CUSTOMER = "customer", "Customer"
    STAFF = "staff", "Staff"


class PreviewOrigin(models.TextChoices):
    """How a preview came to exist; every origin passes the same admission (approvals.services.proposals)."""

    AGENT = "agent", "Proposed by an agent"
    COUNTER_PROPOSAL = "counter_proposal", "Reviewer's counter-proposal"
    STAFF_REPROPOSAL = "staff_reproposal", "Staff re-proposal"


class Preview(models.Model):
    """An exact proposed action. Its payload never changes after creation; only its status does."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    action = models.CharField(max_length=64)
    # Indexed by (actor, created_at) below, which also serves lookups by actor alone.
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False)
    agent_session = models.ForeignKey(
        AgentSession, on_delete=models.PROTECT, null=True, blank=True, related_name="previews"
    )
    subject_type = models.CharField(max_length=32)
    subject_id = models.CharField(max_length=64)
    subject_version = models.PositiveIntegerField()
    payload = models.JSONField()
    # The money the person approves (minor units of `currency`), both null for an action moving none.
    amount_minor = models.BigIntegerField(null=True, blank=True)
    currency = models.CharField(max_length=3, null=True, blank=True)
    proposal_key = models.CharField(max_length=64, help_text="Digest of what was proposed; equal proposals share it.")
    digest = models.CharField(max_length=64, help_text="Digest of exactly what a person approves.")
    required_approvals = models.JSONField()
    status = models.CharField(max_length=32, choices=PreviewStatus.choices, default=PreviewStatus.AWAITING_CUSTOMER)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    status_changed_at = models.DateTimeField(auto_now=True)
    failure_code = models.CharField(max_length=64, blank=True)
    failure_reason = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)
    executed_at = models.DateTimeField(null=True, blank=True)
    # M-of-N (REVIEW_QUORUM): how many distinct staff members must approve; fixed when proposed.
    staff_approvals_needed = models.PositiveSmallIntegerField(default=1)
    # Who proposed it: the agent session's person for an agent's proposal, the staff member for a
    # counter-proposal or a re-proposal. The proposer of any preview of a chain never approves one of it.
    origin = models.CharField(max_length=32, choices=PreviewOrigin.choices, default=PreviewOrigin.AGENT)
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # The first preview of the chain this one continues (a counter-proposal, a re-proposal of a refund the
    # bank failed); null for the first one itself.
    chain_root = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="+", db_index=False
    )
    # A counter-proposal's preview it replaced (superseded, code `counter_proposed`).
    supersedes = models.OneToOneField(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="superseded_by"
    )

    class Meta:
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"]),
            models.Index(fields=["subject_type", "subject_id"]),
            models.Index(fields=["actor", "created_at"]),
            # The console's counts per state (of the action kinds a reviewer decides), index-only.
            models.Index(fields=["action", "status"], name="preview_action_status_idx"),
            models.Index(fields=["chain_root"], name="preview_chain_root_idx", condition=Q(chain_root__isnull=False)),
        ]
        constraints = [
            # The same pending proposal is answered with the existing preview, even under a race.
            models.UniqueConstraint(
                fields=["proposal_key"],
                condition=Q(status__in=["awaiting_customer", "awaiting_staff", "approved"]),
                name="one_open_preview_per_proposal",
            ),
            models.CheckConstraint(condition=Q(amount_minor__gte=0), name="preview_amount_not_negative"),
            models.CheckConstraint(
                condition=Q(amount_minor__isnull=True, currency__isnull=True)
                | Q(amount_minor__isnull=False, currency__isnull=False),
                name="preview_amount_with_currency",
            ),
        ]
        # Staff decide previews of the action kinds whose permission they hold (Action.review_permission,
        # declared by the action on a model of its own, required); this one decides the previews of an
        # action that is no longer installed.
        permissions = [
            ("review_preview", "Can review previews of actions without a permission of their own"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.subject_id} ({self.status})"

    @property
    def chain_id(self) -> Any:
        """The id every preview of this one's chain shares: the first preview's."""
        return self.chain_root_id or self.pk

    @property
    def proposed_by_staff(self) -> bool:
        return self.origin != PreviewOrigin.AGENT

    @property
    def executed(self) -> bool:
        return self.status == PreviewStatus.EXECUTED

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES


class ExecutionOutcome(models.TextChoices):
    """What is known about an approved preview's effect. Everything said to people comes from it."""

    PENDING = "pending", "Waiting for a worker"
    IN_PROGRESS = "in_progress", "In progress"
    SUCCEEDED = "succeeded", "Succeeded"
    REFUSED_BEFORE_EFFECT = "refused_before_effect", "Refused before any effect"
    EFFECT_UNKNOWN = "effect_unknown", "Effect unknown"
    FAILED_AFTER_CHECK = "failed_after_check", "Refused by the provider"
    EFFECT_UNRECORDED = "effect_unrecorded", "Effect made, not recorded"
    # An approval it rested on no longer counts (the approver lost the right): nothing was done, and the
    # preview waits for staff again; a new approval makes it pending.
    AWAITING_APPROVAL = "awaiting_approval", "Waiting for an approval again"


# The effect may exist at the provider and is not in the books yet: its amount counts as in flight.
EFFECT_IN_FLIGHT_OUTCOMES = (
    ExecutionOutcome.IN_PROGRESS,
    ExecutionOutcome.EFFECT_UNKNOWN,
    ExecutionOutcome.EFFECT_UNRECORDED,
)


class Execution(models.Model):
    """The execution of one approved preview: its outcome, its attempts, and the lease on it.

    Only one attempt at a time holds the lease (`lease_owner` until `lease_expires_at`). Each attempt
    gets a new `fencing_token`; an answer carrying an older token comes from an attempt that lost
    its lease and is refused. Changed only through approvals.services.execution.execution_transition.
    """

    preview = models.OneToOneField(Preview, on_delete=models.PROTECT, primary_key=True, related_name="execution")
    outcome = models.CharField(max_length=32, choices=ExecutionOutcome.choices, default=ExecutionOutcome.PENDING)
    attempt = models.PositiveIntegerField(default=0, help_text="Attempts started so far.")
    fencing_token = models.PositiveBigIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    effect_possible = models.BooleanField(
        default=False, help_text="An attempt may have reached the outside world and its answer is not known."
    )
    effect = models.JSONField(null=True, blank=True, help_text="The effect as the provider reported it.")
    code = models.CharField(max_length=64, blank=True)
    detail = models.TextField(blank=True)
    deadline = models.DateTimeField(help_text="A first effect may be made until then; after it, a new proposal.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["outcome", "updated_at"], name="execution_outcome_idx")]

    def __str__(self) -> str:
        return f"execution of {self.preview_id}: {self.outcome} (attempt {self.attempt})"


class Approval(models.Model):
    """A person's yes, bound to the preview, their role, the digest they saw and the subject version."""

    preview = models.ForeignKey(Preview, on_delete=models.PROTECT, related_name="approvals")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    role = models.CharField(max_length=16, choices=ApprovalRole.choices)
    basis = models.CharField(
        max_length=200, blank=True, help_text="What the approval rests on, e.g. a standing approval."
    )
    digest = models.CharField(max_length=64)
    subject_version = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when the approver lost the right to approve (left the group, deactivated) before the preview
    # executed: the approval never counts again, and the person may approve anew once they have it back.
    lapsed_at = models.DateTimeField(null=True, blank=True)
    lapsed_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            # One standing yes per person and role: a quorum needs that many distinct people.
            models.UniqueConstraint(
                fields=["preview", "role", "approver"],
                condition=Q(lapsed_at__isnull=True),
                name="one_approval_per_person_and_role",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} approval of {self.preview_id} by {self.approver}"


class AuditEvent(models.TextChoices):
    AGENT_SESSION_CREATED = "agent_session_created"
    PROPOSAL_INVALID = "proposal_invalid"
    PROPOSAL_FORBIDDEN = "proposal_forbidden"
    PROPOSAL_REFUSED = "proposal_refused"
    PROPOSED = "proposed"
    PROPOSAL_REPEATED = "proposal_repeated"
    CONFIRMED = "confirmed"
    DECLINED = "declined"
    APPROVED = "approved"
    REJECTED = "rejected"
    DECISION_REFUSED = "decision_refused"
    EXECUTION_STARTED = "execution_started"
    EXECUTED = "executed"
    EXECUTION_FAILED = "execution_failed"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"
    EXECUTION_ATTEMPT_FAILED = "execution_attempt_failed"
    RETRIED = "retried"
    EXECUTION_TRANSITION = "execution_transition"
    EXECUTION_FENCED_OFF = "execution_fenced_off"
    AGENT_SESSION_REVOKED = "agent_session_revoked"
    CALL_THROTTLED = "call_throttled"
    SHOP_DATA_CHANGED = "shop_data_changed"
    STANDING_APPROVAL_GRANTED = "standing_approval_granted"
    STANDING_APPROVAL_USED = "standing_approval_used"
    STANDING_APPROVAL_REFUSED = "standing_approval_refused"
    COUNTER_PROPOSED = "counter_proposed"
    REVIEW_CLAIMED = "review_claimed"
    REVIEW_RELEASED = "review_released"
    APPROVAL_LAPSED = "approval_lapsed"
    REVIEWERS_NOTIFIED = "reviewers_notified"
    REVIEW_ESCALATED = "review_escalated"
    LOGIN_PAUSED = "login_paused"
    SHOP_TOKEN_CREATED = "shop_token_created"
    SHOP_TOKEN_REVOKED = "shop_token_revoked"
    SHOP_API_CALL = "shop_api_call"


class CurrentTransactionId(models.Func):
    """The inserting transaction's id on PostgreSQL (`pg_current_xact_id()`, 64 bits, never wraps);
    0 on other databases. The sealer seals a record once no transaction that might commit before it is
    still running (approvals.audit_seal)."""

    output_field = models.BigIntegerField()

    def as_sql(
        self, compiler: "SQLCompiler", connection: "BaseDatabaseWrapper", *args: Any, **extra_context: Any
    ) -> tuple[str, list[Any]]:
        return "0", []

    def as_postgresql(
        self, compiler: "SQLCompiler", connection: "BaseDatabaseWrapper", *args: Any, **extra_context: Any
    ) -> tuple[str, list[Any]]:
        return "(pg_current_xact_id()::text::bigint)", []


class AuditRecord(models.Model):
    """Append-only: rows are only ever inserted, each by a plain INSERT in the audited transaction
    (on PostgreSQL triggers refuse UPDATE, DELETE and TRUNCATE).

    The sealer makes each committed record a leaf of the audit Merkle tree (AuditLeaf) and signs the
    tree's heads (AuditTreeHead); `manage.py verify_audit` checks records, leaves and heads.
    """

    created_at = models.DateTimeField(db_index=True, default=timezone.now)
    transaction_id = models.BigIntegerField(db_default=CurrentTransactionId(), editable=False)
    event = models.CharField(max_length=32, choices=AuditEvent.choices)
    action = models.CharField(max_length=64, blank=True)
    preview = models.ForeignKey(Preview, on_delete=models.PROTECT, null=True, blank=True, related_name="audit_records")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    agent_session = models.ForeignKey(AgentSession, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    subject_type = models.CharField(max_length=32, blank=True)
    subject_id = models.CharField(max_length=64, blank=True)
    raw_arguments = models.TextField(blank=True, help_text="The tool call's arguments exactly as received, unparsed.")
    approval_basis = models.JSONField(null=True, blank=True)
    result = models.JSONField(default=dict)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["subject_type", "subject_id"]),
            models.Index(fields=["transaction_id", "id"], name="auditrecord_seal_order"),
        ]
        permissions = [
            ("export_auditrecord", "Can export the audit records of the actions they decide"),
            (
                "audit_everything",
                "Can see and export every audit record and agent session, and revoke staff agent sessions",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.event} {self.subject_id}"


class AuditLeaf(models.Model):
    """A sealed record's place in the audit Merkle tree: leaf `index` (from 0) is the RFC 9162 leaf hash
    of the record's canonical encoding (approvals.audit_log). Written once, by the sealer."""

    index = models.BigIntegerField(primary_key=True)
    record = models.OneToOneField(AuditRecord, on_delete=models.PROTECT, related_name="leaf")
    leaf_hash = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"leaf {self.index}"


class AuditTreeHead(models.Model):
    """A signed tree head: the tree of the first `size` leaves has root `root_hash`, signed (Ed25519,
    AUDIT_SIGNING_KEY) with the time in milliseconds. Published as a checkpoint outside the database."""

    size = models.BigIntegerField(primary_key=True)
    root_hash = models.CharField(max_length=64)
    timestamp = models.BigIntegerField(help_text="Milliseconds since 1970, as signed.")
    signature = models.CharField(max_length=100)
    public_key = models.CharField(max_length=64)
    horizon = models.BigIntegerField(
        default=0, help_text="PostgreSQL: records of transactions below this id were all sealed by this head."
    )

    class Meta:
        ordering = ["size"]

    def __str__(self) -> str:
        return f"tree head {self.size}"

    def as_checkpoint(self) -> dict:
        return {
            "size": self.size,
            "root_hash": self.root_hash,
            "timestamp": self.timestamp,
            "signature": self.signature,
            "public_key": self.public_key,
        }


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


class ReviewNoticeKind(models.TextChoices):
    REVIEW_NEEDED = "review_needed", "Review needed"
    OVERDUE = "overdue", "Overdue (escalated)"


class ReviewNotice(models.Model):
    """One notification owed about one preview waiting for staff: made by the digest task, sent in
    batches (one email per person and one webhook message per URL, whatever the number of previews).
    A channel's time stays empty until that channel took the message, so a failure is retried."""

    preview = models.ForeignKey(Preview, on_delete=models.CASCADE, related_name="review_notices")
    kind = models.CharField(max_length=16, choices=ReviewNoticeKind.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    emailed_at = models.DateTimeField(null=True, blank=True)
    webhooks_sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["preview", "kind"], name="one_review_notice_per_kind")]

    def __str__(self) -> str:
        return f"{self.kind} notice for {self.preview_id}"


class ReviewClaim(models.Model):
    """A reviewer working a preview, so that two do not work the same one. Claims only guide people:
    the decision itself is still checked (and bound to the digest) by the services."""

    preview = models.OneToOneField(Preview, on_delete=models.CASCADE, primary_key=True, related_name="claim")
    claimed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    assigned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    claimed_at = models.DateTimeField(auto_now=True)

    class Meta:
        permissions = [("manage_review_claims", "Can release or take over another reviewer's claim")]

    def __str__(self) -> str:
        return f"{self.preview_id} claimed by {self.claimed_by}"


class WebhookDeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed (gave up)"


class WebhookDelivery(models.Model):
    """One Standard Webhooks message to an agent session's webhook: a preview transition, its attempts."""

    agent_session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="webhook_deliveries")
    preview = models.ForeignKey(Preview, on_delete=models.CASCADE, related_name="+", null=True, blank=True)
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


class ShopToken(models.Model):
    """A service token of the shop data API (`/api/shop/…`): the shop's own system, not a person. Only
    the token's hash is stored; its label is the operator of everything it changes (docs/shop-data.md)."""

    token_hash = models.CharField(max_length=64, unique=True)
    token_prefix = models.CharField(max_length=16, help_text="First characters, to recognise a token.")
    label = models.CharField(max_length=200)
    scopes = models.JSONField(default=list, help_text="e.g. orders:write, customers:read")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        permissions = [("manage_shop_tokens", "Can see and revoke the shop data API's tokens")]

    def __str__(self) -> str:
        return f"{self.token_prefix}… ({self.label})"


class ShopIdempotencyKey(models.Model):
    """The answer a shop data API write gave under an `Idempotency-Key`, per token: the same key with the
    same request gets it again; with another request it is refused (docs/shop-data.md)."""

    token = models.ForeignKey(ShopToken, on_delete=models.CASCADE, related_name="idempotency_keys")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the method, path, If-Match and body.")
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["token", "key"], name="shop_idempotency_key_once")]

    def __str__(self) -> str:
        return f"{self.key} of {self.token_id}"
