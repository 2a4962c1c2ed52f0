"""The engine's models, by part: agents' sessions and what they leave (`agents`), previews, approvals and
executions (`previews`), passkeys and the signatures kept with approvals (`passkeys`), the audit log's
rows (`audit`), the staff's review work (`review`)."""

from approvals.models.agents import (
    AgentSession,
    IdempotencyRecord,
    RejectedCallKind,
    RejectedCallTally,
    WebhookDelivery,
    WebhookDeliveryStatus,
)
from approvals.models.audit import (
    AuditCosignature,
    AuditEvent,
    AuditLeaf,
    AuditRecord,
    AuditTile,
    AuditTreeHead,
    AuditVerification,
    AuditWitnessAnswer,
    CurrentTransactionId,
)
from approvals.models.outbox import OutboxMessage
from approvals.models.passkeys import ApprovalSignature, Passkey, StepUpChallenge
from approvals.models.previews import (
    AWAITING_STATUSES,
    EFFECT_IN_FLIGHT_OUTCOMES,
    OPEN_STATUSES,
    TERMINAL_STATUSES,
    Approval,
    ApprovalRole,
    Execution,
    ExecutionOutcome,
    Preview,
    PreviewOrigin,
    PreviewStatus,
)
from approvals.models.review import (
    InternalNote,
    ReviewClaim,
    ReviewNotice,
    ReviewNoticeKind,
    SlackReviewMessage,
    SlackSeenRequest,
    SlackUserLink,
)
from approvals.models.shop import (
    ShopIdempotencyKey,
    ShopToken,
)

__all__ = [
    "AWAITING_STATUSES",
    "AgentSession",
    "Approval",
    "ApprovalSignature",
    "ApprovalRole",
    "AuditCosignature",
    "AuditEvent",
    "AuditLeaf",
    "AuditRecord",
    "AuditTile",
    "AuditTreeHead",
    "AuditVerification",
    "AuditWitnessAnswer",
    "CurrentTransactionId",
    "EFFECT_IN_FLIGHT_OUTCOMES",
    "Execution",
    "ExecutionOutcome",
    "IdempotencyRecord",
    "InternalNote",
    "OPEN_STATUSES",
    "OutboxMessage",
    "Passkey",
    "Preview",
    "PreviewOrigin",
    "PreviewStatus",
    "RejectedCallKind",
    "RejectedCallTally",
    "ReviewClaim",
    "ReviewNotice",
    "ReviewNoticeKind",
    "ShopIdempotencyKey",
    "ShopToken",
    "SlackReviewMessage",
    "SlackSeenRequest",
    "SlackUserLink",
    "StepUpChallenge",
    "TERMINAL_STATUSES",
    "WebhookDelivery",
    "WebhookDeliveryStatus",
]
