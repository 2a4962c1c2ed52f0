"""Agent sessions: minting a bearer token for a person (only its hash is stored), and revoking sessions,
which withdraws what they proposed that is not being executed yet."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from oauth2_provider.models import Grant, RefreshToken

from approvals.core.digests import sha256_hex
from approvals.core.errors import ApplicationError, ErrorCode
from approvals.core.locks import agent_sessions_lock, person_lock, previews_lock
from approvals.core.registry import registry
from approvals.core.rows import fetch_one
from approvals.core.services.audit import audit_record, audited_transaction
from approvals.core.services.execution import AGENT_SESSION_REVOKED_REASON, Outcome, execution_transition
from approvals.core.services.execution.opening import preview_end
from approvals.models import OPEN_STATUSES, AgentSession, AuditEvent, Execution, Preview, PreviewStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import User

TOKEN_PREFIX = "agt_"


def agent_token_hash(token: str) -> str:
    return sha256_hex(token)


# How stale "last used" may be: a busy agent's every call must not write its session's row.
LAST_USED_EVERY = timedelta(minutes=1)


def agent_session_used(session: AgentSession, *, now: datetime | None = None) -> None:
    """Record that the session's token authenticated: at most one write a minute per session, one
    UPDATE of the one column (never a save of the row, which would race a revocation), conditioned on
    the stored value so that concurrent requests write it once."""
    now = now or timezone.now()
    if session.last_used_at is not None and now - session.last_used_at < LAST_USED_EVERY:
        return
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_EVERY)
    AgentSession.objects.filter(stale, pk=session.pk).update(last_used_at=now)
    session.last_used_at = now


def _tools_check(user: User, tools: list[str]) -> None:
    for name in tools:
        action = registry.action(name)
        if action is None:
            raise ApplicationError(f"Unknown tool {name!r}.", code=ErrorCode.UNKNOWN_TOOL)
        if not action.may_use(user):
            raise ApplicationError(f"User {user} may not use the tool {name!r}.", code=ErrorCode.TOOL_NOT_ALLOWED)


def _live_sessions_check(user: User) -> None:
    """Refuse a mint past AGENT_SESSIONS_PER_USER_MAX; the person's row is locked by the caller, so that
    concurrent mints are counted one after the other."""
    live = AgentSession.objects.filter(user=user, revoked_at__isnull=True, expires_at__gt=timezone.now()).count()
    limit = settings.AGENT_SESSIONS_PER_USER_MAX
    if live >= limit:
        raise ApplicationError(
            f"{user} already has {live} live agent sessions, the most allowed ({limit}); "
            "revoke one or let it expire first.",
            code=ErrorCode.AGENT_SESSION_LIMIT,
            live_sessions=live,
            limit=limit,
        )


@transaction.atomic
def agent_session_create(
    *, user: User, tools: list[str], ttl_seconds: int | None = None, label: str = ""
) -> tuple[AgentSession, str]:
    """Mint a session for `user`. The token is returned once; only its hash is stored."""
    if not user.is_active:
        raise ApplicationError(f"User {user} is not active.", code=ErrorCode.USER_INACTIVE)
    if not tools:
        raise ApplicationError("Name at least one tool.", code=ErrorCode.NO_TOOLS)
    _tools_check(user, tools)
    ttl = settings.AGENT_SESSION_DEFAULT_TTL_SECONDS if ttl_seconds is None else ttl_seconds
    if ttl <= 0:
        raise ApplicationError("The lifetime must be a positive number of seconds.", code=ErrorCode.BAD_TTL)
    person_lock(user)
    _live_sessions_check(user)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session = AgentSession.objects.create(
        token_hash=agent_token_hash(token),
        token_prefix=token[:12],
        user=user,
        tools=sorted(set(tools)),
        label=label,
        expires_at=timezone.now() + timedelta(seconds=ttl),
    )
    audit_record(
        event=AuditEvent.AGENT_SESSION_CREATED,
        actor=user,
        agent_session=session,
        result={"tools": session.tools, "expires_at": session.expires_at.isoformat()},
    )
    return session, token


def agent_sessions_revoke(
    *,
    session_id: int | None = None,
    token_prefix: str | None = None,
    username: str | None = None,
    user_id: int | None = None,
    revoked_by: User | None = None,
    reason: str = "",
) -> int:
    """Revoke live agent sessions by id, by token prefix or by user; each revocation is audited.

    What a revoked session proposed and is not being executed yet ends with it: its open previews are
    superseded (failure code `agent_session_revoked`), each audited, so that no one confirms, approves
    or executes a proposal of an agent that was stopped.
    """
    sessions = AgentSession.objects.filter(revoked_at__isnull=True)
    if session_id is not None:
        sessions = sessions.filter(pk=session_id)
    elif token_prefix:
        sessions = sessions.filter(token_prefix__startswith=token_prefix[:16])
    elif username:
        sessions = sessions.filter(user__username=username)
    elif user_id is not None:
        sessions = sessions.filter(user_id=user_id)
    else:
        return 0
    count = 0
    with audited_transaction():
        for session in agent_sessions_lock(sessions):
            session.revoked_at = timezone.now()
            session.save(update_fields=["revoked_at"])
            _oauth_tokens_revoke(session)
            superseded = _agent_session_previews_supersede(session)
            audit_record(
                event=AuditEvent.AGENT_SESSION_REVOKED,
                actor=revoked_by,
                agent_session=session,
                result={
                    "token_prefix": session.token_prefix,
                    "user": session.user_id,
                    "previews_superseded": [str(pk) for pk in superseded],
                    **({"reason": reason} if reason else {}),
                },
            )
            count += 1
    return count


def _oauth_tokens_revoke(session: AgentSession) -> None:
    """A session granted through OAuth (approvals.agents.oauth) takes its tokens with it: the code not
    yet exchanged, every refresh token of its family and their access tokens."""
    if session.oauth_grant_id is not None:
        Grant.objects.filter(pk=session.oauth_grant_id).delete()
    if session.oauth_token_family is not None:
        RefreshToken.revoke_family(session.oauth_token_family)


def _agent_session_previews_supersede(session: AgentSession) -> list[Any]:
    """Supersede the session's open previews whose execution has not begun (those are left to finish:
    the provider may already have been asked). Locks previews in primary-key order, like every path."""
    superseded = []
    candidates = Preview.objects.filter(agent_session=session, status__in=OPEN_STATUSES)
    for preview in previews_lock(candidates):
        previous = preview.status
        if preview.status == PreviewStatus.APPROVED:
            execution = fetch_one(Execution, preview_id=preview.pk)  # under its preview's lock
            if execution is None or execution.outcome != Outcome.PENDING:
                continue  # its execution began: the provider may already have been asked; it finishes
            execution_transition(
                execution,
                preview,
                Outcome.REFUSED_BEFORE_EFFECT,
                token=None,
                code=ErrorCode.AGENT_SESSION_REVOKED,
                detail=AGENT_SESSION_REVOKED_REASON,
            )
            superseded.append(preview.pk)
            continue
        preview_end(
            preview,
            PreviewStatus.SUPERSEDED,
            code=ErrorCode.AGENT_SESSION_REVOKED,
            reason=AGENT_SESSION_REVOKED_REASON,
        )
        audit_record(
            event=AuditEvent.SUPERSEDED,
            preview=preview,
            agent_session=session,
            result={
                "code": ErrorCode.AGENT_SESSION_REVOKED,
                "previous_status": previous,
                "reason": AGENT_SESSION_REVOKED_REASON,
            },
        )
        superseded.append(preview.pk)
    return superseded


# A person deactivated and reactivated gets no old token back ---------------------------------------

PERSON_DEACTIVATED = "person_deactivated"
PERSON_REACTIVATED = "person_reactivated"


def _activity_before_save(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
    """Remember whether the person was active before this save (one query; none for a new person or a
    save of named fields without is_active, such as the login's last_login)."""
    instance._active_before_save = None
    if instance.pk is None or (update_fields is not None and "is_active" not in update_fields):
        return
    instance._active_before_save = (
        sender._default_manager.filter(pk=instance.pk).values_list("is_active", flat=True).first()
    )


def _sessions_end_when_activity_changes(sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
    """Deactivating a person revokes their live agent sessions (audited, with what they proposed);
    reactivating them revokes any still live, such as those of a person deactivated by
    `QuerySet.update()`, which sends no signal. Either way a token minted before the latest
    reactivation never works again; the person mints a new one."""
    before = getattr(instance, "_active_before_save", None)
    if created or before is None or before == instance.is_active:
        return
    agent_sessions_revoke(user_id=instance.pk, reason=PERSON_REACTIVATED if instance.is_active else PERSON_DEACTIVATED)


def agent_sessions_follow_person_activity() -> None:
    """Connect the two receivers above to the user model (from AppConfig.ready)."""
    from django.contrib.auth import get_user_model
    from django.db.models.signals import post_save, pre_save

    user_model = get_user_model()
    pre_save.connect(_activity_before_save, sender=user_model, dispatch_uid="agent_sessions_activity_before")
    post_save.connect(
        _sessions_end_when_activity_changes, sender=user_model, dispatch_uid="agent_sessions_activity_after"
    )
