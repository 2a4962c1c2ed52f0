"""The agent session a customer's consent mints for a remote MCP client, and how its tokens find it."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from oauth2_provider.models import AccessToken, Application, RefreshToken

from approvals.core.digests import sha256_hex
from approvals.core.registry import registry
from approvals.core.services import agent_session_create, agent_sessions_revoke
from approvals.models import AgentSession

if TYPE_CHECKING:
    from django.contrib.auth.models import User

OAUTH_TOKEN_REVOKED = "oauth_token_revoked"


def oauth_client_host(application: Application) -> str:
    """The host the client's metadata document is served from (its client_id is that URL)."""
    return urlsplit(application.client_id).hostname or application.client_id


def oauth_tools_for(user: User) -> list[str]:
    """The tools a consent grants: every tool the person may use (what a session minted for them by
    `create_agent_session` may name)."""
    return sorted(name for name, action in registry.actions.items() if action.may_use(user))


def lifetime_choices() -> list[tuple[int, str]]:
    """The lifetimes a customer may pick, as (seconds, words)."""

    def words(seconds: int) -> str:
        if seconds % 86400 == 0:
            days = seconds // 86400
            return f"{days} day" + ("s" if days != 1 else "")
        if seconds % 3600 == 0:
            hours = seconds // 3600
            return f"{hours} hour" + ("s" if hours != 1 else "")
        return f"{max(seconds // 60, 1)} minutes"

    return [(seconds, words(seconds)) for seconds in settings.OAUTH_CONSENT_LIFETIMES]


@transaction.atomic
def oauth_agent_session_create(*, user: User, application: Application, ttl_seconds: int) -> AgentSession:
    """The agent session a consent mints: the person's tools for the lifetime picked, bound to the
    client. Its bearer token is dropped here: only the OAuth tokens issued for it are ever held."""
    name = application.name or oauth_client_host(application)
    session, _token = agent_session_create(
        user=user,
        tools=oauth_tools_for(user),
        ttl_seconds=ttl_seconds,
        label=f"OAuth: {name} ({oauth_client_host(application)})"[:200],
    )
    session.oauth_application = application
    session.save(update_fields=["oauth_application"])
    return session


def oauth_token_family(token: str, application: Application | None = None) -> uuid.UUID | None:
    """The refresh-token family an access or refresh token belongs to (None for an unknown token)."""
    checksum = sha256_hex(token)
    access = AccessToken.objects.filter(token_checksum=checksum)
    refresh = RefreshToken.objects.filter(token_checksum=checksum)
    if application is not None:
        access, refresh = access.filter(application=application), refresh.filter(application=application)
    family = refresh.exclude(token_family=None).values_list("token_family", flat=True).first()
    if family is None:
        family = (
            RefreshToken.objects.filter(access_token__in=access.values("pk"))
            .values_list("token_family", flat=True)
            .first()
        )
    return family


class OAuthTokenInvalid(Exception):
    """The access token is unknown, expired, or belongs to no agent session."""


def oauth_access_token_session(token: str) -> AgentSession:
    """The agent session an OAuth access token acts as. Raises OAuthTokenInvalid; the caller checks
    the session itself (revoked, expired, person inactive) as for a bearer agent token."""
    access = AccessToken.objects.filter(token_checksum=sha256_hex(token)).select_related("refresh_token").first()
    if access is None:
        raise OAuthTokenInvalid("Invalid token.")
    if access.is_expired():
        raise OAuthTokenInvalid("This access token expired; refresh it.")
    refresh = getattr(access, "refresh_token", None)
    family = refresh.token_family if refresh is not None else None
    session = (
        AgentSession.objects.select_related("user").filter(oauth_token_family=family).first()
        if family is not None
        else None
    )
    if session is None or session.user_id != access.user_id:
        raise OAuthTokenInvalid("Invalid token.")
    return session


def oauth_session_revoke_for_token(*, family: uuid.UUID) -> int:
    """Revoke the agent session of a token family (its tokens go with it); audited as any revocation."""
    session_id = AgentSession.objects.filter(oauth_token_family=family).values_list("pk", flat=True).first()
    if session_id is None:
        return 0
    return agent_sessions_revoke(session_id=session_id, reason=OAUTH_TOKEN_REVOKED)
