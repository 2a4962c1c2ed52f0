"""Previews, their approvals and executions: what is proposed, who said yes, what happened."""

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from approvals.models.agents import AgentSession


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
    WITHDRAWN = "withdrawn", "Withdrawn by the agent"


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
    """How a preview came to exist; every origin passes the same admission (approvals.core.services.proposals)."""

    AGENT = "agent", "Proposed by an agent"
    COUNTER_PROPOSAL = "counter_proposal", "Reviewer's counter-proposal"
    STAFF_REPROPOSAL = "staff_reproposal", "Staff re-proposal"
    STAFF_PROPOSAL = "staff_proposal", "Staff proposal"


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
    its lease and is refused. Changed only through approvals.core.services.execution.execution_transition.
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
