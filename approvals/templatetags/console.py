"""Words for the staff console: ages and expiry as people say them, audit facts as readable JSON."""

import json
from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince, timeuntil

from approvals.models import AWAITING_STATUSES, AuditEvent, ExecutionOutcome, Preview, PreviewStatus, ReviewClaim

register = template.Library()


@register.filter
def ago(value: datetime | None) -> str:
    """`12 minutes ago`, `just now`, or `in 3 minutes` for a time still to come."""
    if value is None:
        return ""
    now = timezone.now()
    if abs((now - value).total_seconds()) < 60:
        return "just now"
    if value > now:
        return f"in {timeuntil(value, now, depth=1)}"
    return f"{timesince(value, now, depth=1)} ago"


@register.filter
def expiry_words(preview: Preview) -> str:
    """`expires in 3 minutes` while a preview awaits approval; `expired 2 hours ago` once past."""
    if preview.status not in AWAITING_STATUSES:
        return "no longer waiting"
    now = timezone.now()
    if preview.expires_at > now:
        return f"expires in {timeuntil(preview.expires_at, now, depth=1)}"
    return f"expired {timesince(preview.expires_at, now, depth=1)} ago"


@register.filter
def event_words(event: str) -> str:
    try:
        return AuditEvent(event).label
    except ValueError:
        return event


@register.filter
def pretty_json(value: Any) -> str:
    if value in (None, "", {}, []):
        return ""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@register.simple_tag
def localtime_tag(value: datetime | None) -> str:
    """A time in UTC, labelled as such, that static/js/localtime.js rewrites into the viewer's own
    timezone (with the zone shown); without JavaScript the UTC time stays, labelled."""
    if value is None:
        return ""
    utc = value.astimezone(UTC)
    return format_html(
        '<time datetime="{}" data-localtime>{} UTC</time>',
        utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        utc.strftime("%-d %b %Y, %H:%M"),
    )


@register.filter
def claim_of(preview: Preview) -> ReviewClaim | None:
    try:
        return preview.claim
    except Preview.claim.RelatedObjectDoesNotExist:
        return None


@register.filter
def person(user: Any) -> str:
    """A person by name: their full name with the username, or the username alone."""
    if user is None:
        return ""
    full = user.get_full_name() if hasattr(user, "get_full_name") else ""
    return f"{full} ({user.get_username()})" if full else user.get_username()


@register.filter
def form_field(form: Any, name: str) -> Any:
    return form[name]


@register.filter
def review_summary(preview: Preview) -> str:
    from approvals.core.registry import registry

    action = registry.action(preview.action)
    return action.review_summary(preview) if action else f"{preview.action} on {preview.subject_id}"


def _who(record: Any) -> str:
    if record.actor is None:
        return "The system"
    return person(record.actor)


# What a preview waits for right after it was proposed, for the sentence "it waits for …".
WAITS_FOR: dict[str, str] = {
    PreviewStatus.AWAITING_CUSTOMER: "the customer's confirmation",
    PreviewStatus.AWAITING_STAFF: "a staff review",
    PreviewStatus.APPROVED: "the worker (it was approved at once)",
}


def outcome_words(outcome: str) -> str:
    try:
        return ExecutionOutcome(outcome).label
    except ValueError:
        return outcome or "unknown"


def _signed_words(passkey: Any) -> str:
    """`, signed with their passkey "Phone"`, and the warning when its counter went backwards."""
    if not isinstance(passkey, dict):
        return ""
    words = f', signed with their passkey "{passkey.get("passkey_name", "")}"'
    if passkey.get("counter_regressed"):
        words += f" (its signature counter went backwards, to {passkey.get('sign_count')}: the passkey may be a copy)"
    return words


@register.filter
def record_sentence(record: Any) -> str:
    """One audit record as a sentence a person reads ("rita approved it as staff (1 of 2)…")."""
    result = record.result or {}
    basis = record.approval_basis or {}
    who = _who(record)
    agent = f" through agent session {record.agent_session.token_prefix}…" if record.agent_session_id else ""
    event = record.event
    error = result.get("error")
    if not isinstance(error, dict):
        error = {}
    if event == AuditEvent.PROPOSED:
        waits = WAITS_FOR.get(str(result.get("status", "")), "its next step")
        replaced = result.get("replaces_preview") or result.get("counter_proposal_of")
        if result.get("origin") == "staff_proposal":
            return f"{who} proposed it from the console for the customer; it waits for {waits}."
        if result.get("origin") == "staff_reproposal":
            return f"{who} proposed it again in place of {replaced}, which the bank failed; it waits for {waits}."
        if replaced:
            return f"{who} made a counter-proposal replacing {replaced}; it waits for {waits}."
        return f"{who}{agent} proposed it; it waits for {waits}."
    if event == AuditEvent.PROPOSAL_REFUSED:
        return f"{who}{agent} proposed something the policy refused: {error.get('message', '')}"
    if event == AuditEvent.PROPOSAL_REPEATED:
        return f"{who}{agent} proposed the same again; the existing preview was returned."
    signed = _signed_words(basis.get("passkey"))
    if event == AuditEvent.CONFIRMED:
        return f"{who} confirmed it as the customer{signed}."
    if event == AuditEvent.APPROVED:
        count = ""
        if result.get("staff_approvals_needed"):
            count = f" ({result.get('staff_approvals')} of {result.get('staff_approvals_needed')})"
        how = f", on the basis of {basis.get('basis')}" if basis.get("basis") else ""
        return f"{who} approved it as {basis.get('role', 'staff')}{count}{how}{signed}."
    if event == AuditEvent.DECLINED:
        note = f' Reason: "{result.get("note")}".' if result.get("note") else ""
        return f"{who} declined it as the customer.{note}"
    if event == AuditEvent.REJECTED:
        return f'{who} rejected it. Note: "{result.get("note", "")}".'
    if event == AuditEvent.DECISION_REFUSED:
        return f"{who} tried to decide it and was refused: {error.get('message', '')}"
    if event == AuditEvent.COUNTER_PROPOSED:
        return f"{who} replaced it with a counter-proposal (preview {result.get('new_preview')})."
    if event == AuditEvent.SUPERSEDED:
        return f"It went out of date: {result.get('reason') or 'what it is about changed'}."
    if event == AuditEvent.EXPIRED:
        return "It expired before it was approved; nothing was done."
    if event == AuditEvent.WITHDRAWN:
        waited = WAITS_FOR.get(str(result.get("previous_status", "")), "a decision")
        return f"{who}{agent} withdrew it while it waited for {waited}; nothing was done."
    if event == AuditEvent.EXECUTION_STARTED:
        how = "took over an expired lease for attempt" if result.get("took_over") else "started attempt"
        looks = ", looking the effect up first" if result.get("look_up_first") else ""
        return f"The worker {how} {result.get('attempt', 1)}{looks}."
    if event == AuditEvent.EXECUTION_ATTEMPT_FAILED:
        then = "it will try again" if result.get("will_retry") else "it gave up"
        return f"Attempt {result.get('attempt', '')} failed ({result.get('error', 'no reason given')}); {then}."
    if event == AuditEvent.EXECUTION_TRANSITION:
        return f"The execution is now: {outcome_words(str(result.get('outcome', ''))).lower()}."
    if event == AuditEvent.EXECUTION_FENCED_OFF:
        return (
            "A late answer from an attempt that had lost its lease was refused; the current attempt records the effect."
        )
    if event == AuditEvent.RETRIED:
        return f"{who} asked the worker to try again."
    if event == AuditEvent.PASSKEY_REGISTERED:
        return f'{who} registered the passkey "{result.get("name", "")}".'
    if event == AuditEvent.PASSKEY_REMOVED:
        owner = f" of {result['owner']} (a lost device)" if result.get("by") == "lead" else ""
        return f'{who} removed the passkey "{result.get("name", "")}"{owner}.'
    if event == AuditEvent.STANDING_APPROVAL_USED:
        return f"A standing approval by {who} for this exact invoice and recipient approved it."
    if event == AuditEvent.EXECUTED:
        return "The worker carried it out and recorded the effect."
    if event == AuditEvent.EXECUTION_FAILED:
        return f"The execution failed: {result.get('reason') or error.get('message', '')}"
    if event == AuditEvent.REVIEW_CLAIMED:
        if result.get("assigned"):
            return f"{who} assigned it to {result.get('claimed_by')}."
        taken = f", taking it over from {result['previous']}" if result.get("previous") else ""
        return f"{who} claimed it{taken}."
    if event == AuditEvent.REVIEW_RELEASED:
        holder = result.get("was_claimed_by")
        return f"{who} gave it back to the queue{f' (claimed by {holder})' if holder else ''}."
    if event == AuditEvent.APPROVAL_LAPSED:
        return f"{result.get('approver')}'s approval no longer counts: {result.get('reason', '')}."
    if event == AuditEvent.REVIEWERS_NOTIFIED:
        return f"Reviewers were told it waits (by {' and '.join(result.get('channels', []))})."
    if event == AuditEvent.REVIEW_ESCALATED:
        return f"It was escalated as overdue (by {' and '.join(result.get('channels', []))})."
    # The heading already names the event: the sentence says who, not the event's name again.
    return f"Recorded by {who if record.actor_id else 'the system'}."


@register.filter
def customer_headline(preview: Preview) -> str:
    from approvals.core.presentation import preview_headline

    return preview_headline(preview)


@register.filter
def customer_state_title(preview: Preview) -> str:
    """The preview's state as the customer's own pages name it ("Waiting for your confirmation")."""
    from approvals.core.presentation import customer_state_words

    return customer_state_words(preview)[0]
