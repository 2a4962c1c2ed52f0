import hmac

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from .. import logs
from ..models import AgentSession
from ..services import agent_token_hash


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>`; the session's person is the actor, whatever the call says."""

    keyword = "Bearer"

    def authenticate(self, request):  # type: ignore[no-untyped-def]
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Send the header as `Authorization: Bearer <token>`.")
        try:
            token = header[1].decode("ascii")
        except UnicodeDecodeError as error:
            raise exceptions.AuthenticationFailed("Invalid token.") from error
        digest = agent_token_hash(token)
        try:
            session = AgentSession.objects.select_related("user").get(token_hash=digest)
        except AgentSession.DoesNotExist:
            session = None
        # The lookup is by hash; the comparison below keeps the check constant-time as well.
        if session is None or not hmac.compare_digest(session.token_hash, digest):
            raise exceptions.AuthenticationFailed("Invalid token.")
        if session.revoked_at is not None:
            raise exceptions.AuthenticationFailed("This agent session was revoked.")
        if session.expires_at <= timezone.now():
            raise exceptions.AuthenticationFailed("This agent session expired.")
        if not session.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid token.")
        logs.bind(agent_session=session.pk)
        return session.user, session

    def authenticate_header(self, request):  # type: ignore[no-untyped-def]
        return f'{self.keyword} realm="agent"'


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema names the agent token (drf-spectacular finds it by the class above)."""

    target_class = AgentTokenAuthentication
    name = "agentToken"

    def get_security_definition(self, auto_schema):  # type: ignore[no-untyped-def]
        return {"type": "http", "scheme": "bearer", "description": "An agent session token (agt_…)."}
