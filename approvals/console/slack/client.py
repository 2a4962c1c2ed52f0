"""The Slack side's settings and constants, and talking to Slack's Web API (rate limits respected)."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from prometheus_client import Counter
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

POST_TASK = "approvals.slack_post_review"
UPDATE_TASK = "approvals.slack_update_review"
MESSAGES_PER_BATCH = 10  # more previews waiting at once than this are a burst: one summary message
SUMMARY_LINES = 20
STALE_UPDATES_PER_RUN = 50
PAUSE_KEY = "approvals:slack:paused-until"
KICK_KEY = "approvals:slack:kick"
POST_LOCK = "approvals:slack:post-lock"
POST_LOCK_SECONDS = 600
LINK_SALT = "approvals.slack.link"
LINK_MAX_AGE_SECONDS = 900
ROWS_SHOWN = 12  # facts or request rows in one section (Slack cuts a section's text at 3000 characters)

APPROVE, REJECT, OPEN_CONSOLE = "approve", "reject", "open_console"
REJECT_CALLBACK = "slack_reject"
NOTE_BLOCK = NOTE_INPUT = "note"

slack_calls = Counter(
    "gateway_slack_api_calls",
    "Slack Web API calls by method and outcome (ok, rate_limited, error).",
    ["method", "outcome"],
)


def slack_configured() -> bool:
    return bool(settings.SLACK_BOT_TOKEN and settings.SLACK_SIGNING_SECRET and settings.SLACK_REVIEW_CHANNEL)


# Talking to Slack --------------------------------------------------------------------------------


class SlackRateLimited(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"Slack asked to wait {retry_after:g} s")
        self.retry_after = retry_after


# What a call to Slack may fail with: a refusal, a rate limit, or no answer (urllib's errors are OSErrors).
SLACK_FAILURES = (SlackApiError, SlackRateLimited, OSError)


def _client() -> WebClient:
    base_url = settings.SLACK_API_URL if settings.SLACK_API_URL.endswith("/") else settings.SLACK_API_URL + "/"
    # No retry handlers: a repeated chat.postMessage posts twice, and a 429 is waited out, not retried.
    return WebClient(
        token=settings.SLACK_BOT_TOKEN, base_url=base_url, timeout=settings.SLACK_TIMEOUT_SECONDS, retry_handlers=[]
    )


def _retry_after(error: SlackApiError) -> float:
    headers = {str(k).lower(): v for k, v in (error.response.headers or {}).items()}
    value = headers.get("retry-after")
    if isinstance(value, list):
        value = value[0] if value else None
    try:
        return max(float(value), 1.0) if value is not None else 30.0
    except (TypeError, ValueError):
        return 30.0


def failure_words(error: Exception) -> str:
    return str(error.response.get("error", error)) if isinstance(error, SlackApiError) else str(error)


def paused_for() -> float:
    """Seconds left of a rate limit Slack asked us to respect (0 when none)."""
    until = cache.get(PAUSE_KEY)
    return max(float(until) - time.time(), 0.0) if until else 0.0


def slack_call(method: str, **arguments: Any) -> Any:
    """One Web API call (`method` is WebClient's, e.g. "chat_postMessage"); raises SlackRateLimited while
    Slack's Retry-After lasts, SlackApiError for any other refusal."""
    wait = paused_for()
    if wait > 0:
        raise SlackRateLimited(wait)
    try:
        response = getattr(_client(), method)(**arguments)
    except SlackApiError as error:
        if error.response.status_code == 429:
            retry_after = _retry_after(error)
            cache.set(PAUSE_KEY, time.time() + retry_after, timeout=int(retry_after) + 1)
            slack_calls.labels(method, "rate_limited").inc()
            raise SlackRateLimited(retry_after) from error
        slack_calls.labels(method, "error").inc()
        raise
    slack_calls.labels(method, "ok").inc()
    return response
