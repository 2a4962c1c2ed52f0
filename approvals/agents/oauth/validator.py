"""The toolkit's validator, with every token bound to the agent session the customer's consent minted.

The consent view hands the session's id to the authorization request (`agent_session_id`); the code
saved for it is bound to the session; exchanging the code binds the session to the family of the
refresh token issued for it, which every rotation keeps. A code or refresh token whose session is no
longer live (revoked, expired, its person inactive) is refused like an unknown one, and revoking a
token at /oauth/revoke_token/ revokes the session with it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.utils import timezone
from oauth2_provider.models import Grant
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauthlib.oauth2.rfc6749 import errors

from approvals.agents.oauth.sessions import oauth_session_revoke_for_token, oauth_token_family
from approvals.models import AgentSession


def _live(session: AgentSession | None) -> bool:
    return (
        session is not None
        and session.revoked_at is None
        and session.expires_at > timezone.now()
        and session.user.is_active
    )


LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}


def redirect_uri_acceptable(redirect_uri: str) -> bool:
    """https, or http on a loopback address only: a native client's own listener (RFC 8252 §7.3,
    which RFC 9700 §2.1 keeps). An http redirect anywhere else would carry the code in the clear."""
    parts = urlsplit(redirect_uri)
    if parts.scheme == "https":
        return True
    return parts.scheme == "http" and (parts.hostname or "") in LOOPBACK_HOSTS


class GatewayOAuth2Validator(OAuth2Validator):
    def validate_redirect_uri(self, client_id: str, redirect_uri: str, request: Any, *args: Any, **kwargs: Any) -> bool:
        if not redirect_uri_acceptable(redirect_uri):
            return False
        return bool(super().validate_redirect_uri(client_id, redirect_uri, request, *args, **kwargs))

    def _create_authorization_code(self, request: Any, code: dict[str, str], expires: Any = None) -> Grant:
        grant = super()._create_authorization_code(request, code, expires)
        session_id = getattr(request, "agent_session_id", None)
        bound = 0
        if session_id is not None:
            bound = AgentSession.objects.filter(
                pk=session_id,
                user=request.user,
                oauth_application=request.client,
                oauth_grant__isnull=True,
                oauth_token_family__isnull=True,
                revoked_at__isnull=True,
            ).update(oauth_grant=grant)
        if not bound:
            # Only a consent mints a session: a code for none could never be exchanged anyway.
            grant.delete()
            raise errors.AccessDeniedError(description="No consent was given for this client.", request=request)
        return grant

    def validate_code(self, client_id: str, code: str, client: Any, request: Any, *args: Any, **kwargs: Any) -> bool:
        if not super().validate_code(client_id, code, client, request, *args, **kwargs):
            return False
        session = (
            AgentSession.objects.select_related("user")
            .filter(oauth_grant__code=code, oauth_grant__application=client)
            .first()
        )
        if not _live(session):
            return False
        request.agent_session = session
        return True

    def _create_refresh_token(
        self, request: Any, refresh_token_code: str, access_token: Any, previous_refresh_token: Any
    ) -> Any:
        refresh = super()._create_refresh_token(request, refresh_token_code, access_token, previous_refresh_token)
        session = getattr(request, "agent_session", None)
        if previous_refresh_token is None and session is not None:
            AgentSession.objects.filter(pk=session.pk, oauth_token_family__isnull=True).update(
                oauth_token_family=refresh.token_family
            )
        return refresh

    def validate_refresh_token(self, refresh_token: str, client: Any, request: Any, *args: Any, **kwargs: Any) -> bool:
        if not super().validate_refresh_token(refresh_token, client, request, *args, **kwargs):
            return False
        family = request.refresh_token_instance.token_family
        session = (
            AgentSession.objects.select_related("user").filter(oauth_token_family=family).first()
            if family is not None
            else None
        )
        if not _live(session):
            return False
        request.agent_session = session
        return True

    def revoke_token(self, token: str, token_type_hint: str, request: Any, *args: Any, **kwargs: Any) -> None:
        family = oauth_token_family(token, request.client) if getattr(request.client, "pk", None) else None
        super().revoke_token(token, token_type_hint, request, *args, **kwargs)
        if family is not None:
            oauth_session_revoke_for_token(family=family)
