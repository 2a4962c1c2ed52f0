from __future__ import annotations

import secrets
from functools import cache as once
from typing import TYPE_CHECKING, cast

import redis
from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

if TYPE_CHECKING:
    from ..models import AgentSession

# DRF's sliding window (drop the calls older than the window, refuse at the limit, else record this
# call) as one Redis command: DRF's own throttle reads and writes the whole history through the cache,
# two round trips and a pickled list per call, on every agent request. Returns 1, or 0 and the time of
# the call whose leaving the window lets the session call again.
_SLIDING_WINDOW = """
local key, now, window, limit = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
if count >= limit then
  local oldest_that_counts = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
  return {0, oldest_that_counts[2]}
end
redis.call('ZADD', key, now, ARGV[4])
redis.call('EXPIRE', key, math.ceil(window))
return {1, ''}
"""


@once
def _sliding_window_script(location: str) -> redis.commands.core.Script:
    """One client (and connection pool) per process for the cache's Redis; redis-py reconnects after a fork."""
    return redis.Redis.from_url(location).register_script(_SLIDING_WINDOW)


class AgentSessionThrottle(SimpleRateThrottle):
    """Per agent session; counters live in the shared cache (Redis in production)."""

    scope = "agent"
    oldest_that_counts: float | None = None
    # Set by SimpleRateThrottle.__init__ from the rate (parse_rate); read only when there is a rate.
    num_requests: int
    duration: int

    def get_rate(self) -> str:
        return settings.AGENT_THROTTLE_RATE

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        session = cast("AgentSession | None", request.auth)  # set by AgentTokenAuthentication
        if session is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": session.pk}

    def allow_request(self, request: Request, view: APIView) -> bool:
        backend = caches["default"]  # what DRF's `self.cache` stands for
        if not isinstance(backend, RedisCache) or self.rate is None:
            return super().allow_request(request, view)
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.now = self.timer()
        # The primary, which Django's client writes to; RedisCache keeps its locations in `_servers`.
        script = _sliding_window_script(backend._servers[0])  # type: ignore[attr-defined]  # private, not in the stubs
        allowed, oldest = script(
            keys=[backend.make_and_validate_key(self.key)],
            args=[repr(self.now), self.duration, self.num_requests, f"{self.now!r}:{secrets.token_hex(6)}"],
        )
        if allowed:
            return True
        self.oldest_that_counts = float(oldest)
        return False

    def wait(self) -> float:
        """Seconds until this session may call again, and always a number: a 429 carries Retry-After.

        DRF's estimate is None once the history holds more calls than the rate allows (the rate was
        lowered at run time, or concurrent calls raced past the count), and then no Retry-After is sent.
        A call is allowed again once the `num_requests`-th newest call has left the window.
        """
        if self.oldest_that_counts is None:
            if not self.history or not self.num_requests:
                return float(self.duration)
            self.oldest_that_counts = self.history[min(self.num_requests, len(self.history)) - 1]
        return max(self.duration - (self.now - self.oldest_that_counts), 1.0)


class AgentUserThrottle(AgentSessionThrottle):
    """Per person, across all their agent sessions: minting more sessions does not buy more calls."""

    scope = "agent_user"

    def get_rate(self) -> str:
        return settings.AGENT_USER_THROTTLE_RATE

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        session = cast("AgentSession | None", request.auth)  # set by AgentTokenAuthentication
        if session is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": session.user_id}
