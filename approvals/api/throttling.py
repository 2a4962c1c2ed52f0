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

    def wait(self) -> float:
        """Seconds until this session may call again, and always a number: a 429 carries Retry-After.

        DRF's estimate is None once the history holds more calls than the rate allows (the rate was
        lowered at run time, or concurrent calls raced past the count), and then no Retry-After is sent.
        A call is allowed again once the `num_requests`-th newest call has left the window.
        """
        if not self.history or not self.num_requests:
            return float(self.duration)
        oldest_that_counts = self.history[min(self.num_requests, len(self.history)) - 1]
        return max(self.duration - (self.now - oldest_that_counts), 1.0)
