"""Errors that services raise and the API and pages turn into answers."""

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
