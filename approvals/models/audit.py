"""The audit log's rows: records (plain inserts), the leaves the sealer hashed, the signed tree heads."""

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from approvals.models.agents import AgentSession
from approvals.models.previews import Preview

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler


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
    WITHDRAWN = "withdrawn"
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
    PASSKEY_REGISTERED = "passkey_registered"
    PASSKEY_REMOVED = "passkey_removed"
    INTERNAL_NOTE_ADDED = "internal_note_added"


class CurrentTransactionId(models.Func):
    """The inserting transaction's id on PostgreSQL (`pg_current_xact_id()`, 64 bits, never wraps);
    0 on other databases. The sealer seals a record once no transaction that might commit before it is
    still running (approvals.audit.seal)."""

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
    of the record's canonical encoding (approvals.audit.log). Written once, by the sealer."""

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
    note = models.TextField(
        blank=True,
        help_text="The c2sp.org/tlog-checkpoint signed note (the log's signatures; witnesses' cosignatures apart).",
    )
    horizon = models.BigIntegerField(
        default=0, help_text="PostgreSQL: records of transactions below this id were all sealed by this head."
    )

    class Meta:
        ordering = ["size"]

    def __str__(self) -> str:
        return f"tree head {self.size}"

    def as_checkpoint(self) -> dict:
        checkpoint = {
            "size": self.size,
            "root_hash": self.root_hash,
            "timestamp": self.timestamp,
            "signature": self.signature,
            "public_key": self.public_key,
        }
        if self.note:
            checkpoint["note"] = self.note
        return checkpoint


class AuditCosignature(models.Model):
    """A witness's c2sp.org/tlog-cosignature line over a tree head's checkpoint note."""

    head = models.ForeignKey(AuditTreeHead, on_delete=models.PROTECT, related_name="cosignatures")
    witness = models.CharField(max_length=300, help_text="The witness's verifier key (vkey).")
    line = models.TextField(help_text="The signature line as the witness returned it.")
    timestamp = models.BigIntegerField(help_text="The cosignature's time, seconds since 1970.")
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["head", "witness"], name="one_cosignature_per_witness")]

    def __str__(self) -> str:
        return f"cosignature of {self.witness.split('+')[0]} on tree head {self.head_id}"


class AuditWitnessAnswer(models.Model):
    """What a configured witness last made of a checkpoint it was sent (approvals.audit.witnesses.Outcome):
    one row per witness, overwritten by each answer. /readyz and the metrics report a witness refusing
    from here, a refused checkpoint is not sent to that witness again, and one task at a time asks it
    (`asking_until`)."""

    witness = models.CharField(max_length=300, unique=True, help_text="The witness's verifier key (vkey).")
    outcome = models.CharField(max_length=16, blank=True, help_text="Empty until its first answer.")
    size = models.BigIntegerField(help_text="The size of the checkpoint sent.")
    old_size = models.BigIntegerField(help_text="The old size the last request carried.")
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    witness_size = models.BigIntegerField(null=True, blank=True, help_text="The size the witness named in a 409.")
    detail = models.CharField(max_length=500, blank=True)
    answered_at = models.DateTimeField(default=timezone.now)
    asking_until = models.DateTimeField(
        null=True, blank=True, help_text="A task is sending it a checkpoint (until then at the latest)."
    )

    def __str__(self) -> str:
        return f"{self.witness.split('+')[0]}: {self.outcome} at size {self.size}"


class AuditTile(models.Model):
    """A c2sp.org/tlog-tiles hash tile: at level 0 the leaf hashes, above each hash the root of a full tile
    of the level below. Only the right edge grows (the sealer appends to it, never rewrites a byte; on
    PostgreSQL a trigger refuses anything else), so a partial tile `.p/<W>` is the first W hashes."""

    level = models.PositiveSmallIntegerField()
    index = models.BigIntegerField()
    hashes = models.BinaryField(help_text="Up to 256 SHA-256 hashes, concatenated.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["level", "index"], name="one_tile_per_place")]

    def __str__(self) -> str:
        return f"tile {self.level}/{self.index} ({len(self.hashes) // 32} hashes)"


class AuditVerification(models.Model):
    """The last checkpoint `verify_audit` found intact: the next run starts from it (`--full` does not)."""

    size = models.BigIntegerField()
    root_hash = models.CharField(max_length=64)
    verified_at = models.DateTimeField(default=timezone.now)

    class Meta:
        get_latest_by = "verified_at"

    def __str__(self) -> str:
        return f"verified up to {self.size}"
