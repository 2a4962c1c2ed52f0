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
    """Execution was refused for good: the preview fails and is not retried."""

    code = "execution_failed"


class TransientExecutionError(Exception):
    """Execution could not finish now (a provider timeout, a 5xx); retrying is safe."""
