"""A preview's own facts, shared by every service that changes one: its digest, the status its
approvals put it in, a status change with its reason, and its approvals as the executor reads them."""

from __future__ import annotations

from typing import Any

from approvals.core.digests import digest_of
from approvals.core.rows import fetch_all, update_fields
from approvals.core.transitions import preview_transitioned
from approvals.models import Approval, Preview, PreviewOrigin, PreviewStatus


def preview_digest(preview: Preview) -> str:
    """What a person approves: the SHA-256 of the canonical JSON of `preview_digest_facts`."""
    return digest_of(preview_digest_facts(preview))


def preview_digest_facts(preview: Preview) -> dict[str, Any]:
    """Every fact of the preview that decides what happens: what its digest is made of."""
    return {
        "id": str(preview.id),
        "action": preview.action,
        "actor": preview.actor_id,
        "subject_type": preview.subject_type,
        "subject_id": preview.subject_id,
        "subject_version": preview.subject_version,
        "payload": preview.payload,
        "amount_minor": preview.amount_minor,
        "currency": preview.currency,
        "required_approvals": preview.required_approvals,
        "expires_at": preview.expires_at.isoformat(),
        # Only when set, so that the digests of earlier previews stay what they were.
        **({"staff_approvals_needed": n} if (n := preview.staff_approvals_needed) != 1 else {}),
        **_proposer_facts(preview),
        **({"supersedes": str(preview.supersedes_id)} if preview.supersedes_id else {}),
    }


def _proposer_facts(preview: Preview) -> dict[str, object]:
    """Who proposed it, when that is staff (under the keys earlier previews' digests were made with)."""
    if preview.origin == PreviewOrigin.COUNTER_PROPOSAL:
        return {"counter_author": preview.proposed_by_id}
    if preview.origin == PreviewOrigin.AGENT:
        return {}
    return {"origin": preview.origin, "proposed_by": preview.proposed_by_id}


def status_awaiting(required: list[str], approved_roles: set[str]) -> PreviewStatus:
    """The first role still to approve (`awaiting_<role>`), or approved."""
    for role in required:
        if role not in approved_roles:
            return PreviewStatus(f"awaiting_{role}")
    return PreviewStatus.APPROVED


def preview_mark(preview: Preview, status: PreviewStatus, *, code: str = "", reason: str = "") -> None:
    """Move a locked preview to `status` with its failure code and reason (blank for none)."""
    previous = preview.status
    preview.status = status
    preview.failure_code = code
    preview.failure_reason = reason
    update_fields(preview, ["status", "failure_code", "failure_reason", "status_changed_at"])
    preview_transitioned(preview, previous)


def approvals_of(preview: Preview) -> list[Approval]:
    """`list(preview.approvals.all())`, with its SQL built once: every execution reads them."""
    return fetch_all(Approval, preview_id=preview.pk)
