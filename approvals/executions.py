"""Kept importable for callers written before approvals.services.execution: the execution's public
names, re-exported from there (docs/execution.md). New code imports approvals.services."""

from .services.execution import (
    AGENT_SESSION_REVOKED_REASON,
    TRANSITIONS,
    FencedOff,
    IllegalTransition,
    Outcome,
    effect_reference,
    execution_attempt_failed,
    execution_retry,
    execution_retry_refusal,
    execution_staff_step,
    execution_transition,
    executions_dispatch_stalled,
    executions_of,
    executions_resolve_unknown,
    is_retryable_refusal,
    preview_execute,
    preview_status_for,
)

__all__ = [
    "AGENT_SESSION_REVOKED_REASON",
    "TRANSITIONS",
    "FencedOff",
    "IllegalTransition",
    "Outcome",
    "effect_reference",
    "execution_attempt_failed",
    "execution_retry",
    "execution_retry_refusal",
    "execution_staff_step",
    "execution_transition",
    "executions_dispatch_stalled",
    "executions_of",
    "executions_resolve_unknown",
    "is_retryable_refusal",
    "preview_execute",
    "preview_status_for",
]
