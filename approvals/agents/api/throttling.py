from __future__ import annotations

import secrets
from functools import cache as once
from typing import TYPE_CHECKING, Any, cast

import redis
from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle
from rest_framework.views import APIView

if TYPE_CHECKING:
    from approvals.models import AgentSession

# DRF's sliding window (drop the calls older than the window, refuse at the limit, else record this
# call) as one Redis command for all of a call's limits at once: DRF's own throttle reads and writes
# the whole history through the cache, two round trips and a pickled list per call and per limit, on
# every agent request. KEYS are the limits' counters, ARGV the time, this call's member, then each
# limit's window and count. A call refused by any limit is recorded in none. Returns {} when allowed,
# else for each limit that refuses its position and the time of the call whose leaving the window
# lets the session call again.
_SLIDING_WINDOWS = """
local now, member = tonumber(ARGV[1]), ARGV[2]
local refused = {}
for i, key in ipairs(KEYS) do
  local window, limit = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local count = redis.call('ZCARD', key)
  if count >= limit then
    local oldest_that_counts = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
    table.insert(refused, i)
    table.insert(refused, oldest_that_counts[2])
  end
end
if #refused > 0 then
  return refused
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, member)
  redis.call('EXPIRE', key, math.ceil(tonumber(ARGV[1 + 2 * i])))
end
return {}
"""


@once
def _sliding_windows_script(location: str) -> redis.commands.core.Script:
    """One client (and connection pool) per process for the cache's Redis; redis-py reconnects after a fork."""
    return redis.Redis.from_url(location).register_script(_SLIDING_WINDOWS)


class AgentSessionThrottle(SimpleRateThrottle):
    """Per agent session; counters live in the shared cache (Redis in production). Checked, with the
    person's limit, by AgentThrottle."""

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


class AgentThrottle(BaseThrottle):
    """The agent API's limits, the session's and its person's, checked together: a call goes through
    when neither is reached, and then counts in both; a refused call counts in neither. On Redis that
    is one command (`_SLIDING_WINDOWS`); on another cache, DRF's sliding window of each limit."""

    limits = (AgentSessionThrottle, AgentUserThrottle)

    def __init__(self) -> None:
        self.refusing: list[AgentSessionThrottle] = []

    def allow_request(self, request: Request, view: APIView) -> bool:
        limits = [limit_class() for limit_class in self.limits]
        now = limits[0].timer()  # one time for both limits
        counted = []
        for limit in limits:
            limit.key = limit.get_cache_key(request, view) if limit.rate is not None else None
            if limit.key is not None:
                limit.now = now
                counted.append(limit)
        if not counted:
            return True
        backend = caches["default"]  # what DRF's `limit.cache` stands for
        if isinstance(backend, RedisCache):
            self.refusing = self._refusing_on_redis(backend, counted, now)
        else:
            self.refusing = self._refusing_in_cache(counted)
        return not self.refusing

    @staticmethod
    def _refusing_on_redis(
        backend: RedisCache, limits: list[AgentSessionThrottle], now: float
    ) -> list[AgentSessionThrottle]:
        # The primary, which Django's client writes to; RedisCache keeps its locations in `_servers`.
        script = _sliding_windows_script(backend._servers[0])  # type: ignore[attr-defined]  # private, not in the stubs
        args: list[Any] = [repr(now), f"{now!r}:{secrets.token_hex(6)}"]
        for limit in limits:
            args += [limit.duration, limit.num_requests]
        refused = script(keys=[backend.make_and_validate_key(limit.key) for limit in limits], args=args)
        refusing = []
        for position, oldest in zip(refused[::2], refused[1::2], strict=True):
            limit = limits[int(position) - 1]
            limit.oldest_that_counts = float(oldest)
            refusing.append(limit)
        return refusing

    @staticmethod
    def _refusing_in_cache(limits: list[AgentSessionThrottle]) -> list[AgentSessionThrottle]:
        """DRF's sliding window (SimpleRateThrottle.allow_request), every limit checked before any counts."""
        for limit in limits:
            limit.history = limit.cache.get(limit.key, [])
            while limit.history and limit.history[-1] <= limit.now - limit.duration:
                limit.history.pop()
        refusing = [limit for limit in limits if len(limit.history) >= limit.num_requests]
        if not refusing:
            for limit in limits:
                limit.throttle_success()
        return refusing

    def wait(self) -> float:
        """Seconds until every refusing limit lets the session call again."""
        return max(limit.wait() for limit in self.refusing)
