"""Errors that services raise and the API and pages turn into answers, and the engine's error codes."""

from enum import StrEnum
from typing import Any


class ApplicationError(Exception):
    """A business rule said no. `code` is stable; `message` is for people and models."""

    code = "application_error"

    def __init__(self, message: str, *, code: str | None = None, **facts: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.facts = facts

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.facts}


class PolicyRefusal(ApplicationError):
    """The proposal breaks a rule of the shop's policy (a 422 for the agent)."""

    code = "policy_refusal"


class DecisionError(ApplicationError):
    """A confirmation or decision cannot be taken on this preview as it stands."""

    code = "decision_refused"


class ExecutionFailure(ApplicationError):
    """Execution was refused for good: the preview fails and is not retried automatically.

    By default the outside world was asked and said no (`failed_after_check`). A subclass says when
    the failure is known to come before anything was asked (`before_effect`, e.g. a gateway that is
    not configured: staff may retry once it is fixed), or when the outside world acted but not as
    asked (`effect_made`, e.g. a refund in another currency: the effect exists and needs a person).
    """

    code = "execution_failed"
    before_effect = False
    effect_made = False


class TransientExecutionError(Exception):
    """Execution could not finish now (a provider timeout, a 5xx); retrying is safe.

    `effect_possible` says whether the request may have reached the outside world and acted (a
    time-out, a 500) or is known not to have (a refused connection, a 429, an SMTP 4xx).
    """

    def __init__(self, message: str = "", *, effect_possible: bool = True) -> None:
        super().__init__(message)
        self.effect_possible = effect_possible
        self.fencing_token: int | None = None


class EffectLookupUnavailable(Exception):
    """The action cannot tell whether an earlier attempt made its effect (plain SMTP keeps no record)."""


class ErrorCode(StrEnum):
    """The engine's stable error and failure codes: what the API returns (`error.code`), what a
    refused decision carries, and what a preview or execution records as its `failure_code` / `code`.
    Members are strings, so they compare, serialize and store as their values. Actions declare their
    own policy codes; these are the engine's."""

    # The agent API, before the policy (approvals.agents.api).
    INVALID_REQUEST = "invalid_request"
    MALFORMED_REQUEST = "malformed_request"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    NOT_AUTHENTICATED = "not_authenticated"
    AUTHENTICATION_FAILED = "authentication_failed"
    PERMISSION_DENIED = "permission_denied"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NOT_ACCEPTABLE = "not_acceptable"
    THROTTLED = "throttled"
    ERROR = "error"
    UNKNOWN_TOOL = "unknown_tool"
    TOOL_NOT_ALLOWED = "tool_not_allowed"
    INVALID_ARGUMENTS = "invalid_arguments"
    INVALID_IDEMPOTENCY_KEY = "invalid_idempotency_key"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    BAD_HOST = "bad_host"
    BAD_ORIGIN = "bad_origin"
    REQUEST_TOO_LARGE = "request_too_large"

    # Agent sessions.
    USER_INACTIVE = "user_inactive"
    NO_TOOLS = "no_tools"
    BAD_TTL = "bad_ttl"
    AGENT_SESSION_LIMIT = "agent_session_limit"
    AGENT_SESSION_REVOKED = "agent_session_revoked"
    INVALID_WEBHOOK_URL = "invalid_webhook_url"

    # Decisions (DecisionError) and how a preview ended before execution.
    EXPIRED = "expired"
    DECLINED = "declined"
    REJECTED = "rejected"
    WITHDRAWN = "withdrawn"
    SUPERSEDED = "superseded"
    SUBJECT_CHANGED = "subject_changed"
    ALREADY_DECIDED = "already_decided"
    NOT_AWAITING_DECISION = "not_awaiting_decision"
    FOUR_EYES = "four_eyes"
    NOT_A_REVIEWER = "not_a_reviewer"
    COUNTER_AUTHOR = "counter_author"
    ALREADY_APPROVED_BY_YOU = "already_approved_by_you"
    DIGEST_MISMATCH = "digest_mismatch"
    CLAIMED_BY_ANOTHER = "claimed_by_another"
    VERSION_MISMATCH = "version_mismatch"
    COUNTER_PROPOSED = "counter_proposed"
    COUNTER_UNCHANGED = "counter_unchanged"
    COUNTER_EXISTS = "counter_exists"
    UNKNOWN_ACTION = "unknown_action"
    # A passkey step-up (approvals.core.stepup): none given where one is needed (or none registered), or
    # one that does not verify for this person, this preview (or list) and this single-use challenge.
    STEP_UP_REQUIRED = "step_up_required"
    STEP_UP_INVALID = "step_up_invalid"

    # Execution (approvals.core.services.execution) and a person's retry of it.
    SUBJECT_UNAVAILABLE = "subject_unavailable"
    APPROVAL_MISSING = "approval_missing"
    APPROVAL_LAPSED = "approval_lapsed"
    EXECUTION_DEADLINE_PASSED = "execution_deadline_passed"
    EFFECT_UNKNOWN = "effect_unknown"
    RECORD_FAILED = "record_failed"
    RETRIES_EXHAUSTED = "retries_exhausted"
    ILLEGAL_TRANSITION = "illegal_transition"
    FENCED_OFF = "fenced_off"
    NOT_NEEDING_ATTENTION = "not_needing_attention"
    NEWER_PREVIEW_OPEN = "newer_preview_open"
    LOOKUP_UNAVAILABLE = "lookup_unavailable"
