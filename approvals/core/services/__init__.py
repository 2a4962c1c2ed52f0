"""Write services of the approvals engine, by capability:

- `audit`: appending to the audit log in the caller's transaction (`audit_record`);
- `sessions`: agent sessions, minted and revoked;
- `proposals`: the one admission path (`proposal_admit`) for every origin of a preview;
- `decisions`: the one decision path (`preview_decide`): confirmations, staff approvals and rejections, expiry;
- `passkeys`: passkeys registered and removed, step-up challenges, and the check of an assertion that
  `preview_decide` asks for an approval at or above a step-up threshold;
- `rights`: who may propose, decide or count as an approver now (asked by all three paths);
- `execution`: the leased state machine that executes an approved preview, its sweeper, resolver and retry;
- `approvals.core.locks` (beside the services, so that the limits use it too): the one module that takes
  row locks, in the order its docstring states;
- `previews`: a preview's digest and status changes, shared by the above.

Each service owns its transaction. The names below are the package's public interface: import them from
`approvals.core.services`. The services never import approvals.tasks (they publish tasks by name,
approvals.operations.publish); the tasks call the services.
"""

from approvals.core.services.audit import audit_record, audited_transaction
from approvals.core.services.decisions import (
    Decision,
    approval_add,
    decision_error,
    preview_approve,
    preview_decide,
    preview_decline,
    preview_expire_if_due,
    preview_refresh,
    previews_expire_stale,
)
from approvals.core.services.execution import (
    AGENT_SESSION_REVOKED_REASON,
    TRANSITIONS,
    FencedOff,
    IllegalTransition,
    Outcome,
    execution_attempt_failed,
    execution_dispatch,
    execution_enqueue,
    execution_open,
    execution_retry,
    execution_retry_refusal,
    execution_transition,
    executions_dispatch_stalled,
    executions_resolve_unknown,
    is_retryable_refusal,
    preview_execute,
    preview_status_for,
)
from approvals.core.services.passkeys import (
    PasskeyError,
    VerifiedStepUp,
    may_manage_passkeys,
    passkey_register,
    passkey_registration_options,
    passkey_remove,
    passkeys_remove_for_lost_device,
    signature_document,
    step_up_options,
)
from approvals.core.services.previews import preview_digest, preview_mark
from approvals.core.services.proposals import (
    IdempotencyConflict,
    ProposalOutcome,
    idempotent_call,
    preview_build,
    preview_insert_or_twin,
    preview_withdraw,
    proposal_admit,
    proposal_audit_rejected,
    proposal_key,
    proposal_submit,
)
from approvals.core.services.rights import (
    may_manage_claims,
    may_review,
    may_review_action,
    proposer_chain,
    staff_right_error,
)
from approvals.core.services.sessions import (
    TOKEN_PREFIX,
    agent_session_create,
    agent_session_used,
    agent_sessions_revoke,
    agent_token_hash,
)

__all__ = [
    "AGENT_SESSION_REVOKED_REASON",
    "Decision",
    "TOKEN_PREFIX",
    "TRANSITIONS",
    "VerifiedStepUp",
    "FencedOff",
    "IdempotencyConflict",
    "IllegalTransition",
    "Outcome",
    "PasskeyError",
    "ProposalOutcome",
    "agent_session_create",
    "agent_session_used",
    "agent_sessions_revoke",
    "agent_token_hash",
    "approval_add",
    "audit_record",
    "audited_transaction",
    "decision_error",
    "execution_attempt_failed",
    "execution_dispatch",
    "execution_enqueue",
    "execution_open",
    "execution_retry",
    "execution_retry_refusal",
    "execution_transition",
    "executions_dispatch_stalled",
    "executions_resolve_unknown",
    "idempotent_call",
    "is_retryable_refusal",
    "may_manage_claims",
    "may_manage_passkeys",
    "may_review",
    "may_review_action",
    "passkey_register",
    "passkey_registration_options",
    "passkey_remove",
    "passkeys_remove_for_lost_device",
    "preview_approve",
    "preview_build",
    "preview_decide",
    "preview_decline",
    "preview_digest",
    "preview_execute",
    "preview_expire_if_due",
    "preview_insert_or_twin",
    "preview_mark",
    "preview_refresh",
    "preview_status_for",
    "preview_withdraw",
    "previews_expire_stale",
    "proposal_admit",
    "proposal_audit_rejected",
    "proposer_chain",
    "proposal_key",
    "proposal_submit",
    "signature_document",
    "staff_right_error",
    "step_up_options",
]
