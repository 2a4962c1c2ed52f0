"""What a review message says: the Block Kit blocks for a preview, its outcome once decided, the reject modal."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.utils.timesince import timeuntil

from approvals.console.review_messages import console_url
from approvals.console.selectors import queue_rows
from approvals.console.slack.client import (
    APPROVE,
    NOTE_BLOCK,
    NOTE_INPUT,
    OPEN_CONSOLE,
    REJECT,
    REJECT_CALLBACK,
    ROWS_SHOWN,
)
from approvals.core.money import format_minor
from approvals.core.presentation import preview_execution, preview_state_words
from approvals.core.registry import registry
from approvals.core.words import customer_named, quoted, slack_escaped
from approvals.models import (
    ApprovalRole,
    AuditEvent,
    Preview,
    PreviewStatus,
)

# What a message says -----------------------------------------------------------------------------


def _text(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text[:3000]}


def section_block(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _text(text)}


def _button_value(preview: Preview) -> str:
    return f"{preview.pk}:{preview.digest}:{preview.subject_version}"


def _slack_date(moment: datetime) -> str:
    """A time Slack draws in the reader's own timezone (`<!date^…>`, with a UTC fallback)."""
    fallback = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} {{time}}|{fallback}>"


def _rows(title: str, rows: list[Any]) -> dict[str, Any] | None:
    """Rows of labelled values. Values are quoted: an action's rows may carry what the agent or the
    customer chose (a recipient, a username), and Slack gives no other way to set them apart."""
    if not rows:
        return None
    lines = [f"• {slack_escaped(row.label)}: {slack_escaped(quoted(str(row.value), limit=200))}" for row in rows]
    more = [f"… and {len(rows) - ROWS_SHOWN} more in the console"] if len(rows) > ROWS_SHOWN else []
    return section_block("\n".join([title, *lines[:ROWS_SHOWN], *more]))


def _customer(preview: Preview) -> str:
    person = preview.actor
    email = f" ({quoted(person.email)})" if person.email else ""
    return slack_escaped(customer_named(person.get_username()) + email)


def _amount(preview: Preview) -> str:
    if preview.amount_minor is None or not preview.currency:
        return "none"
    return format_minor(preview.amount_minor, preview.currency)


def _quorum(preview: Preview, staff_approvals: int) -> str:
    if preview.staff_approvals_needed > 1:
        return f"{staff_approvals} of {preview.staff_approvals_needed} staff approvals"
    return "1 staff approval needed"


def preview_summary(preview: Preview) -> str:
    action = registry.action(preview.action)
    return action.review_summary(preview) if action else f"{preview.action} on {preview.subject_id}"


def _console_button(preview: Preview) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": OPEN_CONSOLE,
        "text": {"type": "plain_text", "text": "Open in the console"},
        "url": console_url(preview),
    }


def _decided_by(preview: Preview) -> str:
    """Who decided, from the approvals and the audit (never from the message)."""
    if preview.status == PreviewStatus.REJECTED:
        record = preview.audit_records.filter(event=AuditEvent.REJECTED).select_related("actor").last()
        if record is None or record.actor is None:
            return ""
        where = " in Slack" if str((record.result or {}).get("channel", "")).startswith("slack:") else ""
        note = (record.result or {}).get("note") or ""
        return slack_escaped(f"Rejected by {record.actor.get_username()}{where}, noting {quoted(note, limit=300)}.")
    approvals = [
        a
        for a in preview.approvals.select_related("approver").order_by("created_at")
        if a.role == ApprovalRole.STAFF and a.lapsed_at is None
    ]
    if not approvals:
        return ""
    names = ", ".join(
        a.approver.get_username() + (" (in Slack)" if a.basis.startswith("slack:") else "") for a in approvals
    )
    return slack_escaped(f"Approved by {names}.")


def message_for(preview: Preview, *, staff_approvals: int | None = None) -> tuple[str, list[dict[str, Any]]]:
    """(the fallback text, the blocks) of the preview's message as it is now: the console's summary with
    the buttons while it waits for staff, and the outcome without them once it does not."""
    row = queue_rows([preview])[0]
    summary = slack_escaped(preview_summary(preview))
    fingerprint = {
        "type": "context",
        "elements": [
            _text(
                f"Fingerprint `{preview.digest[:12]}`: a decision is bound to it, and refused if the preview "
                "changed first. Customer- and agent-chosen words are in quotes, marked as theirs."
            )
        ],
    }
    if preview.status != PreviewStatus.AWAITING_STAFF:
        title, _sentence = preview_state_words(preview, "staff", preview_execution(preview))
        decided = _decided_by(preview)
        reason = slack_escaped(preview.failure_reason) if preview.failure_reason else ""
        outcome_lines = [line for line in (decided, "" if decided.startswith("Rejected") else reason) if line]
        blocks = [
            {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
            section_block(summary),
            *([section_block("\n".join(outcome_lines))] if outcome_lines else []),
            fingerprint,
            {"type": "actions", "block_id": "review", "elements": [_console_button(preview)]},
        ]
        return slack_escaped(f"{title}: ") + summary, blocks
    action = registry.action(preview.action)
    value = _button_value(preview)
    have = row.staff_approvals if staff_approvals is None else staff_approvals
    fields = [
        _text(f"*Action*\n{slack_escaped(preview.action)}"),
        _text(f"*Subject*\n{slack_escaped(f'{preview.subject_type} {preview.subject_id}')}"),
        _text(f"*Amount*\n{slack_escaped(_amount(preview))}"),
        _text(f"*Customer*\n{_customer(preview)}"),
        _text(f"*Quorum*\n{_quorum(preview, have)}"),
        _text(f"*Expires*\nin {timeuntil(preview.expires_at, depth=1)} ({_slack_date(preview.expires_at)})"),
    ]
    consequence = action.consequence(preview) if action else ""
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "Waiting for staff review"}},
        section_block(summary),
        {"type": "section", "fields": fields},
        *[
            block
            for block in (
                _rows("*The exact request*", action.display_rows(preview) if action else []),
                _rows("*Verified facts* (the shop's records, now)", action.review_facts(preview) if action else []),
            )
            if block
        ],
        *[section_block(f":warning: *Check:* {slack_escaped(flag.text)}") for flag in row.flags],
        fingerprint,
        {
            "type": "actions",
            "block_id": "review",
            "elements": [
                {
                    "type": "button",
                    "action_id": APPROVE,
                    "style": "primary",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "value": value,
                    "confirm": {
                        "title": {"type": "plain_text", "text": "Approve this preview?"},
                        "text": {"type": "plain_text", "text": (consequence or preview_summary(preview))[:300]},
                        "confirm": {"type": "plain_text", "text": "Approve"},
                        "deny": {"type": "plain_text", "text": "Cancel"},
                    },
                },
                {
                    "type": "button",
                    "action_id": REJECT,
                    "style": "danger",
                    "text": {"type": "plain_text", "text": "Reject…"},
                    "value": value,
                },
                _console_button(preview),
            ],
        },
    ]
    return "Waiting for staff review: " + summary, blocks


def reject_modal(value: str) -> dict[str, Any]:
    """The modal that asks for the reason of a rejection; the button's value travels with it."""
    return {
        "type": "modal",
        "callback_id": REJECT_CALLBACK,
        "private_metadata": value,
        "title": {"type": "plain_text", "text": "Reject this preview"},
        "submit": {"type": "plain_text", "text": "Reject"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": NOTE_BLOCK,
                "label": {"type": "plain_text", "text": "Why (the customer and the agent see it)"},
                "element": {"type": "plain_text_input", "action_id": NOTE_INPUT, "multiline": True, "max_length": 1000},
            }
        ],
    }
