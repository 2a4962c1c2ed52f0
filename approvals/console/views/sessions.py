"""Agent sessions in the staff member's scope, and their revocation."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Count
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals.console import selectors
from approvals.console.views.common import (
    forbidden,
    sessions_viewer_required,
)
from approvals.core.services import (
    agent_sessions_revoke,
)
from approvals.core.types import AuthenticatedHttpRequest

# Agent sessions ------------------------------------------------------------------------------


@sessions_viewer_required
@require_GET
def agent_sessions(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The live sessions this staff member oversees (selectors.agent_sessions_in_scope), each marked
    with whether they may revoke it (a staff member's session: the auditor only)."""
    live = list(selectors.agent_sessions_in_scope(user=request.user).annotate(preview_count=Count("previews")))
    previews = selectors.agent_session_previews(user=request.user, sessions=live)
    sessions = [
        (session, selectors.may_revoke_agent_session(user=request.user, session=session), previews[session.pk])
        for session in live
    ]
    return render(
        request,
        "console/agent_sessions.html",
        {
            "sessions": sessions,
            "nav": "sessions",
            "everything": selectors.is_auditor(user=request.user),
            "webhook_deliveries": selectors.webhook_deliveries_in_scope(user=request.user),
        },
    )


@sessions_viewer_required
@require_POST
def agent_session_revoke(request: AuthenticatedHttpRequest, session_id: int) -> HttpResponse:
    # Out of scope is answered like missing: the page does not tell which sessions exist elsewhere.
    session = selectors.agent_sessions_in_scope(user=request.user).filter(pk=session_id).first()
    if session is None:
        messages.info(request, "That agent session had already expired or been revoked.")
    elif not selectors.may_revoke_agent_session(user=request.user, session=session):
        return forbidden(request)
    else:
        # By id: a 12-character prefix is not unique, and would revoke every session that shares it.
        agent_sessions_revoke(session_id=session.pk, revoked_by=request.user)
        messages.success(request, f"Revoked the agent session {session.token_prefix}… of {session.user}.")
    return redirect("console:agent_sessions")
