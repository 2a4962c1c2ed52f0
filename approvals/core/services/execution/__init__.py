"""The execution of approved previews: an explicit, leased state machine.

Every approved preview has one Execution. Its outcome says what is known about the effect, and the
preview's status is derived from it (`preview_status_for`):

    pending ──► in_progress ──► succeeded                      (executed)
       │            │  ▲ ╲───► failed_after_check             (failed: the provider said no)
       │            │  │  ╲──► effect_unrecorded ──► succeeded (needs_attention: made, not recorded)
       │            │  │   ╲─► effect_unknown ──┐              (needs_attention: may have been made)
       ▼            ▼  └────────────────────────┘  (the resolver looks the effect up first)
    refused_before_effect                          (failed / superseded; needs_attention if retryable)
       ▲
    awaiting_approval ◄── pending, in_progress     (awaiting_staff: an approval lapsed before any effect;
                     ──► pending                    a new approval makes it pending again)

One function, `execution_transition`, makes every change: it refuses a transition the table does not
allow and an answer from an attempt that lost its lease (an older fencing token), and audits each.

An attempt runs in three steps (Brandur's recovery points): (1) under locks, take the lease and
either run every check (nothing can have happened yet) or, when an earlier attempt may have acted,
look the effect up first; (2) with no lock held, make the effect through the action, idempotently
per preview; (3) under locks, record it in a savepoint and mark the execution succeeded. A recording
that hits a constraint leaves the effect on the execution (`effect_unrecorded`), never lost.

Only an expired lease can be taken over (`executions_dispatch_stalled`), and the taker gets a new
fencing token. A lease must outlast one provider call (EXECUTION_LEASE_SECONDS > the provider's time-out).
Rows are locked through approvals.core.locks, in its order.

The package, by job: `state` (the table and the one transition), `opening` (an approved preview's
execution and publishing it), `gate` (the checks before a first effect, written once), `attempt` (the
three steps), `sweeps` (the sweeper and the resolver), `staff` (retry, resolve, say nothing happened),
`siblings` (superseding a subject's other previews).
"""

from approvals.core.services.execution.attempt import approvals_named, execution_attempt_failed, preview_execute
from approvals.core.services.execution.opening import execution_dispatch, execution_enqueue, execution_open
from approvals.core.services.execution.staff import (
    execution_retry,
    execution_retry_refusal,
)
from approvals.core.services.execution.state import (
    AGENT_SESSION_REVOKED_REASON,
    TRANSITIONS,
    FencedOff,
    IllegalTransition,
    Outcome,
    execution_transition,
    is_retryable_refusal,
    preview_status_for,
)
from approvals.core.services.execution.sweeps import executions_dispatch_stalled, executions_resolve_unknown

__all__ = [
    "AGENT_SESSION_REVOKED_REASON",
    "TRANSITIONS",
    "FencedOff",
    "IllegalTransition",
    "Outcome",
    "approvals_named",
    "execution_attempt_failed",
    "execution_dispatch",
    "execution_enqueue",
    "execution_open",
    "execution_retry",
    "execution_retry_refusal",
    "execution_transition",
    "executions_dispatch_stalled",
    "executions_resolve_unknown",
    "is_retryable_refusal",
    "preview_execute",
    "preview_status_for",
]
