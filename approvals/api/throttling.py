from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class AgentSessionThrottle(SimpleRateThrottle):
    """Per agent session; counters live in the shared cache (Redis in production)."""

    scope = "agent"

    def get_rate(self) -> str:
        return settings.AGENT_THROTTLE_RATE

    def get_cache_key(self, request, view):  # type: ignore[no-untyped-def]
        if request.auth is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}
