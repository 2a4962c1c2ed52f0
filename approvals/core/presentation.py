"""How a preview is described to agents (JSON) and to people (words)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils import formats, timezone

from approvals.core.registry import Action, registry
from approvals.models import ApprovalRole, AuditEvent, AuditRecord, Execution, ExecutionOutcome, Preview, PreviewStatus


def confirm_path(preview: Preview) -> str:
    return reverse("approvals:preview", kwargs={"preview_id": preview.pk})


def preview_representation(preview: Preview, *, base_url: str) -> dict[str, Any]:
    action = registry.action(preview.action)
    data: dict[str, Any] = {"id": str(preview.pk), "action": preview.action}
    if action is not None:
        data.update(action.preview_fields(preview))
    data["status"] = preview.status
    data["expires_at"] = preview.expires_at.isoformat().replace("+00:00", "Z")
    data["required_approvals"] = list(preview.required_approvals)
    if ApprovalRole.CUSTOMER in preview.required_approvals:
        data["confirm_url"] = base_url.rstrip("/") + confirm_path(preview)
    data["executed"] = preview.executed
    data["origin"] = preview.origin
    if preview.proposed_by_staff and preview.proposed_by is not None:
        data["proposed_by"] = preview.proposed_by.get_username()
    data["outcome"] = preview_outcome(preview)
    if preview.status == PreviewStatus.EXECUTED:
        data["result"] = preview.result
    if preview.status == PreviewStatus.DECLINED:
        # The customer's note is their words, not the server's: it is in customer_note, never the reason.
        data["failure"] = {"code": preview.failure_code or "declined", "reason": DECLINED_REASON}
    elif preview.failure_code:
        data["failure"] = {"code": preview.failure_code, "reason": preview.failure_reason}
    if preview.failure_code == "counter_proposed":
        # A reviewer replaced it: the agent follows the new preview (same agent session).
        replacement = Preview.objects.filter(supersedes_id=preview.pk).values_list("pk", flat=True).first()
        data["superseded_by"] = str(replacement) if replacement else None
    if preview.staff_approvals_needed != 1:
        data["staff_approvals_needed"] = preview.staff_approvals_needed
    return data


DECLINED_REASON = "The customer declined."


def customer_note(preview: Preview) -> str | None:
    """What the customer wrote when declining, as the audit recorded it (None: nothing written)."""
    if preview.status != PreviewStatus.DECLINED:
        return None
    record = (
        AuditRecord.objects.filter(preview=preview, event=AuditEvent.DECLINED).order_by("-pk").values("result").first()
    )
    note = (record or {}).get("result", {}).get("note") if record else None
    return note if isinstance(note, str) and note else None


def preview_headline(preview: Preview) -> str:
    action = registry.action(preview.action)
    return action.headline(preview) if action else preview.action


def format_datetime(value: Any) -> str:
    return formats.date_format(timezone.localtime(value), "j M Y, H:i T")


@dataclass(frozen=True)
class StateWording:
    """How one state reads to each audience. `{headline}` and `{reason}` are filled in."""

    title: str
    agent: str
    customer: str
    staff: str


# The one table everything said about a preview comes from. A state is the preview's status before
# execution and the execution's outcome from then on: "nothing was done" appears only where the
# outcome proves it.
STATE_WORDING: dict[str, StateWording] = {
    "awaiting_customer": StateWording(
        "Waiting for your confirmation",
        "{headline}: nothing has happened yet. The customer must confirm it.",
        "Nothing has happened yet.",
        "The customer has not confirmed yet; staff decide after they do.",
    ),
    "awaiting_staff": StateWording(
        "Waiting for staff review",
        "{headline}: nothing has happened yet. A staff member must review and approve it.",
        "Our support team checks this request before it is carried out.",
        "It needs a staff decision.",
    ),
    "pending": StateWording(
        "Processing",
        "{headline}: approved and being processed. It is not completed yet.",
        "The approval is recorded and the request is being carried out.",
        "Approved; waiting for a worker to execute it.",
    ),
    "in_progress": StateWording(
        "Processing",
        "{headline}: approved and being processed. It is not completed yet.",
        "The approval is recorded and the request is being carried out.",
        "Approved; a worker is executing it.",
    ),
    "succeeded": StateWording("Completed", "{outcome}", "{outcome}", "{outcome}"),
    "refused_before_effect": StateWording(
        "Not carried out",
        "{headline}: not carried out, nothing was done. Reason: {reason}",
        "Nothing was done. Reason: {reason}",
        "Refused by the checks before anything was done ({code}): {reason} It needs a new proposal.",
    ),
    "refused_retryable": StateWording(
        "Not started yet",
        "{headline}: could not be started, nothing was done yet. Our staff will retry it. Reason: {reason}",
        "Nothing has been done yet: it could not be started. Our support team will try again.",
        "Nothing was done ({code}): {reason} Retrying runs every check again with the same idempotency key.",
    ),
    "failed_after_check": StateWording(
        "Failed",
        "{headline}: failed, {performer} refused it and nothing was done. Reason: {reason}",
        "It could not be carried out, and nothing was done. Reason: {reason}",
        "{Performer} refused it for good ({code}): {reason} Nothing was done; a retry cannot change this.",
    ),
    "effect_unknown": StateWording(
        "Being checked",
        "{headline}: we could not confirm the result with {performer} yet. It will not be done a second "
        "time; we are checking, and this status will change once we know.",
        "We could not confirm this with {performer} yet. It will not be done a second time; we are checking.",
        "The effect is unknown ({code}): {reason} The resolver looks it up before anything is tried again; "
        "it is never made twice.",
    ),
    "effect_unrecorded": StateWording(
        "Done, records being updated",
        "{headline}: carried out by {performer}, but our records could not be updated yet. It will not be "
        "done again; our staff are correcting the records.",
        "This was carried out, but our records are still being updated. It will not be done again.",
        "The effect was made but could not be recorded ({code}): {reason} Mend the data, then record it again.",
    ),
    # A preview whose execution record is missing (not made by this engine): say only what is known.
    "approved": StateWording(
        "Processing",
        "{headline}: approved and being processed. It is not completed yet.",
        "The approval is recorded and the request is being carried out.",
        "Approved; no execution is recorded yet.",
    ),
    "executed": StateWording("Completed", "{outcome}", "{outcome}", "{outcome}"),
    "failed": StateWording(
        "Failed",
        "{headline}: failed. Reason: {reason}",
        "It could not be carried out. Reason: {reason}",
        "Failed ({code}): {reason}",
    ),
    "needs_attention": StateWording(
        "Being checked",
        "{headline}: being checked by our staff. It will not be done a second time.",
        "Our support team is checking this request. It will not be done a second time.",
        "Needs attention ({code}): {reason}",
    ),
    # Fixed words: the customer's own note is never part of them (customer_note carries it, marked).
    "declined": StateWording(
        "Declined",
        "{headline}: declined by the customer, nothing was done. Anything the customer wrote is in customer_note.",
        "You declined this request; nothing was done.",
        "The customer declined it; nothing was done.",
    ),
    "rejected": StateWording(
        "Rejected by our support team",
        "{headline}: rejected by staff, nothing was done. Note: {reason}",
        "Nothing was done. Note from our support team: {reason}",
        "Nothing was done. Note from the reviewer: {reason}",
    ),
    "expired": StateWording(
        "Expired",
        "{headline}: expired before it was approved, nothing was done.",
        "This request was not approved in time; nothing was done. Ask the assistant for a new one.",
        "It expired before it was approved; nothing was done.",
    ),
    "superseded": StateWording(
        "Out of date",
        "{headline}: out of date, nothing was done. {reason}",
        "Nothing was done with this request. {reason}",
        "Out of date; nothing was done. {reason}",
    ),
    "withdrawn": StateWording(
        "Withdrawn",
        "{headline}: withdrawn by the agent before it was decided, nothing was done.",
        "The assistant withdrew this request before it was decided; nothing was done.",
        "The agent withdrew it before it was decided; nothing was done.",
    ),
}


def preview_execution(preview: Preview) -> Execution | None:
    """The preview's execution, if it was ever approved (one query, only when there can be one)."""
    if preview.status in (
        PreviewStatus.AWAITING_CUSTOMER,
        PreviewStatus.AWAITING_STAFF,
        PreviewStatus.DECLINED,
        PreviewStatus.REJECTED,
        PreviewStatus.EXPIRED,
        PreviewStatus.WITHDRAWN,
    ):
        return None
    cached = preview._state.fields_cache.get("execution")
    if cached is not None:
        return cached
    return Execution.objects.filter(pk=preview.pk).first()


def preview_outcome(preview: Preview) -> str | None:
    execution = preview_execution(preview)
    return execution.outcome if execution is not None else None


def preview_state_key(preview: Preview, execution: Execution | None = None) -> str:
    execution = execution if execution is not None else preview_execution(preview)
    if execution is None:
        return str(preview.status)
    if execution.outcome == ExecutionOutcome.REFUSED_BEFORE_EFFECT:
        if preview.status == PreviewStatus.SUPERSEDED:
            return "superseded"
        if preview.status == PreviewStatus.NEEDS_ATTENTION:
            return "refused_retryable"
    return str(execution.outcome)


def preview_state_words(preview: Preview, audience: str, execution: Execution | None = None) -> tuple[str, str]:
    """(title, sentence) for `audience` ("agent", "customer" or "staff")."""
    wording = STATE_WORDING[preview_state_key(preview, execution)]
    action = registry.action(preview.action)
    outcome, title = "", wording.title
    if preview.status == PreviewStatus.EXECUTED:
        outcome = action.outcome_text(preview) if action else f"{preview_headline(preview)}: completed."
        title = (action.outcome_title(preview) if action else None) or title
    performer = action.effect_performer if action else Action.effect_performer
    text = getattr(wording, audience).format(
        headline=preview_headline(preview),
        performer=performer,
        Performer=performer[:1].upper() + performer[1:],
        reason=preview.failure_reason or "none given",
        code=preview.failure_code,
        outcome=outcome,
    )
    return title, " ".join(text.split())


def preview_message(preview: Preview, *, base_url: str, confirm_url: str | None = None) -> str:
    """The status in words an agent can relay truthfully; 'done' only once the worker executed it."""
    if preview.status == PreviewStatus.AWAITING_CUSTOMER:
        url = confirm_url or base_url.rstrip("/") + confirm_path(preview)
        text = (
            f"{preview_headline(preview)}: nothing has happened yet. The customer must confirm this exact "
            f"preview at {url} before {format_datetime(preview.expires_at)}."
        )
        if ApprovalRole.STAFF in preview.required_approvals:
            text += " A staff member will review it after the customer confirms."
        return text
    return preview_state_words(preview, "agent")[1]


def preview_envelope(preview: Preview, *, base_url: str) -> dict[str, Any]:
    representation = preview_representation(preview, base_url=base_url)
    return {
        "ok": True,
        "executed": preview.executed,
        "status": preview.status,
        "outcome": representation["outcome"],
        "preview": representation,
        "message": preview_message(preview, base_url=base_url, confirm_url=representation.get("confirm_url")),
        "customer_note": customer_note(preview),
    }


# What a customer reads when a request of theirs went out of date, by failure code: what happened
# and what to do, without the engine's own words. For `subject_changed` the action may say it in its
# own words (Action.subject_changed_words: "Your order changed...").
SUBJECT_CHANGED = (
    "What this request is about changed after it was made, so what it shows may no longer be right. "
    "Nothing was done. Ask the assistant for a new request: it will use things as they are now."
)
CUSTOMER_OUT_OF_DATE = {
    "subject_changed": SUBJECT_CHANGED,
    "counter_proposed": (
        "Our support team changed this request, so nothing was done with this version. "
        "Please look at the changed request and confirm or decline it."
    ),
    "agent_session_revoked": (
        "The assistant that made this request was stopped before anything was done. "
        "Nothing was done; ask again if you still want it."
    ),
}

# Refusals of a customer's own decision, in their words (DecisionError codes).
CUSTOMER_DECISION_ERRORS = {
    "superseded": SUBJECT_CHANGED,
    "expired": "This request was not confirmed in time; nothing was done. Ask the assistant for a new one.",
    "digest_mismatch": "This request changed while you were looking at it. Review it again before deciding.",
    "already_decided": "You already decided this request.",
    "not_awaiting_decision": "This request can no longer be decided.",
}


def subject_changed_words(preview: Preview) -> str:
    """Why a customer's request went out of date when its subject changed, in the action's words."""
    action = registry.action(preview.action)
    return (action.subject_changed_words(preview) if action else None) or SUBJECT_CHANGED


def customer_decision_error(preview: Preview, code: str, message: str) -> str:
    """A refusal of the customer's own decision in their words (DecisionError codes)."""
    if code == "superseded":
        return subject_changed_words(preview)
    return CUSTOMER_DECISION_ERRORS.get(code, message)


def customer_state_words(preview: Preview) -> tuple[str, str]:
    """(title, sentence) for the customer, with the out-of-date explanation where there is one."""
    title, text = preview_state_words(preview, "customer")
    if preview.status == PreviewStatus.SUPERSEDED and preview.failure_code == "subject_changed":
        text = subject_changed_words(preview)
    elif preview.status == PreviewStatus.SUPERSEDED and preview.failure_code in CUSTOMER_OUT_OF_DATE:
        text = CUSTOMER_OUT_OF_DATE[preview.failure_code]
    elif preview.status == PreviewStatus.DECLINED:
        text = "You declined this request; nothing was done."
    return title, text
