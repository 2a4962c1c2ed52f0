from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any, cast

from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from approvals.agents.oauth.sessions import OAuthTokenInvalid, oauth_access_token_session
from approvals.core.rows import fetch_one_related
from approvals.core.services import agent_session_used, agent_token_hash
from approvals.models import AgentSession
from approvals.operations import logs

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from drf_spectacular.openapi import AutoSchema


BEARER_HEADER_EXAMPLE = "`Authorization: Bearer agt_…` (the agent token, after `Bearer ` and a space)"


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>`; the session's person is the actor, whatever the call says."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[User, AgentSession] | None:
        header = authentication.get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower() != self.keyword.lower().encode():
            # No other scheme is served here: a bare token or another scheme gets told what to send.
            raise exceptions.AuthenticationFailed(
                f"The Authorization header must start with `Bearer `: send {BEARER_HEADER_EXAMPLE}."
            )
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(f"Send the header as {BEARER_HEADER_EXAMPLE}.")
        try:
            token = header[1].decode("ascii")
        except UnicodeDecodeError as error:
            raise exceptions.AuthenticationFailed("Invalid token.") from error
        digest = agent_token_hash(token)
        session = fetch_one_related(AgentSession, "user", token_hash=digest)
        # The lookup is by hash; the comparison below keeps the check constant-time as well.
        if session is None:
            # Not an agent token: an OAuth access token acts as the agent session its consent minted.
            try:
                session = oauth_access_token_session(token)
            except OAuthTokenInvalid as invalid:
                raise exceptions.AuthenticationFailed(str(invalid)) from invalid
        elif not hmac.compare_digest(session.token_hash, digest):
            raise exceptions.AuthenticationFailed("Invalid token.")
        if session.revoked_at is not None:
            raise exceptions.AuthenticationFailed("This agent session was revoked.")
        if session.expires_at <= timezone.now():
            raise exceptions.AuthenticationFailed("This agent session expired.")
        if not session.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid token.")
        agent_session_used(session)
        logs.bind(agent_session=session.pk)
        return session.user, session

    def authenticate_header(self, request: Request | HttpRequest | None) -> str:
        """The challenge, with where a remote MCP client finds how to get a token (RFC 9728)."""
        if request is None:
            return f'{self.keyword} realm="agent"'
        metadata = request.build_absolute_uri(reverse("oauth2_provider:oauth-resource-metadata"))
        return f'{self.keyword} realm="agent", resource_metadata="{metadata}"'


def request_agent_session(request: Request) -> AgentSession:
    """The agent session AgentTokenAuthentication authenticated `request` with: the agent views let no
    other request in (IsAuthenticated). An annotation only: returns request.auth itself."""
    return cast(AgentSession, request.auth)


def request_person(request: Request) -> User:
    """The person `request` is authenticated as: never AnonymousUser behind IsAuthenticated. An annotation
    only: returns request.user itself."""
    return cast("User", request.user)


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema names the agent token (drf-spectacular finds it by the class above)."""

    target_class = AgentTokenAuthentication
    name = "agentToken"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer", "description": "An agent session token (agt_…)."}
