"""Structured logs: which request, preview, agent session and action a line belongs to, and no secrets.

The context lives in a context variable: the web's first middleware binds the request id, the agent
API's authentication binds the agent session, the pipeline functions (approvals.operations.metrics) bind the
preview they handle, and config/celery.py carries the context with a task and binds it in the worker.
ContextFilter copies it onto every record; JsonFormatter (LOG_FORMAT=json) writes one JSON object per
line, TextFormatter (the default) a readable line. Both scrub what they write (`scrub`), and Sentry's
events go through the same scrubbing (config/sentry.py).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from contextvars import ContextVar, Token
from types import MappingProxyType
from typing import Any

from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

CONTEXT_FIELDS = ("request_id", "preview_id", "agent_session", "action")

_context: ContextVar[Mapping[str, str]] = ContextVar("approvals_log_context", default=MappingProxyType({}))

# What a client may send as X-Request-ID: the characters of UUIDs, trace ids and the like, bounded.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:=+/@-]{1,128}", re.ASCII)


def request_id_from(header: str | None) -> str:
    """The caller's X-Request-ID when it is a sane one, else a new id."""
    if header and _REQUEST_ID.fullmatch(header):
        return header
    return uuid.uuid4().hex


def current() -> Mapping[str, str]:
    return _context.get()


def bind(**fields: Any) -> Token:
    """Add fields (None and "" are left out) to the context; returns the token to `reset` it with."""
    values = {name: str(value) for name, value in fields.items() if value is not None and value != ""}
    return _context.set({**_context.get(), **values})


def replace(fields: dict[str, str]) -> Token:
    """Set the context to exactly `fields` (a task's context taken from its message)."""
    return _context.set({name: str(value) for name, value in fields.items() if name in CONTEXT_FIELDS and value})


def reset(token: Token) -> None:
    try:
        _context.reset(token)
    except ValueError:  # made in another context (a thread handed over); forget everything instead
        _context.set(MappingProxyType({}))


def bind_preview(preview: Any) -> None:
    """The preview's id, its agent session's id (never the token) and its action."""
    bind(preview_id=preview.pk, agent_session=preview.agent_session_id, action=preview.action)


class ContextFilter(logging.Filter):
    """Copies the bound context onto each record, where the record does not carry the field already."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in _context.get().items():
            if getattr(record, name, None) in (None, ""):
                setattr(record, name, value)
        # django.request logs a 4xx or 5xx after the middleware returned (the context is gone by then),
        # with the request on the record.
        if getattr(record, "request_id", None) is None and hasattr(record, "request"):
            request_id = getattr(record.request, "request_id", None)
            if request_id:
                record.request_id = request_id
        return True


# Scrubbing -------------------------------------------------------------------------------------

REDACTED = "[redacted]"

# Keys whose values are never written, wherever they appear (extra fields, Sentry's request data).
_SECRET_KEY = re.compile(
    r"pass(word|wd)?|secret|token|authori[sz]ation|cookie|session_?id|csrf|api_?key|signature|"
    r"card|iban|account_?number|body|dsn",
    re.IGNORECASE,
)
# The context's own fields are ids, never secrets, whatever their names look like.
_SAFE_KEYS = frozenset({*CONTEXT_FIELDS, "token_prefix"})


def _luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _mask_card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    if not _luhn_valid(digits):
        return match.group(0)
    return f"[card …{digits[-4:]}]"


_SECRET_TEXT: list[tuple[re.Pattern[str], Any]] = [
    # Agent tokens (agt_…), webhook signing secrets (whsec_…), Stripe keys (sk_/rk_live_…).
    (re.compile(r"\bagt_[A-Za-z0-9_-]+"), "agt_" + REDACTED),
    (re.compile(r"\bwhsec_[A-Za-z0-9+/=_-]+"), "whsec_" + REDACTED),
    (re.compile(r"\b(sk|rk|pk)_(live|test)_[A-Za-z0-9]+"), r"\1_\2_" + REDACTED),
    # Credentials in headers and URLs.
    (re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE), r"\1 " + REDACTED),
    (re.compile(r"(\w+://[^:/@\s]+:)[^@\s]+@"), r"\1" + REDACTED + "@"),
    # key=value and "key": "value" pairs naming a secret.
    (
        re.compile(
            r"""(?i)\b((?:pass(?:word|wd)?|secret|token|api_?key|authorization)["']?\s*[:=]\s*["']?)"""
            r"""(?!\[redacted\]|bearer\b|basic\b)[^\s"'&,;}]+"""
        ),
        r"\1" + REDACTED,
    ),
    # Card numbers (13 to 19 digits that pass the Luhn check) and IBANs: only the last four stay.
    (re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,18}(?![\w-])"), _mask_card),
    (
        re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"),
        lambda m: f"[iban …{m.group(0).replace(' ', '')[-4:]}]",
    ),
]


def scrub(text: str) -> str:
    """The text with every credential, card number and bank account number masked."""
    for pattern, replacement in _SECRET_TEXT:
        text = pattern.sub(replacement, text)
    return text


def scrub_value(value: Any, *, key: str = "") -> Any:
    """`scrub` through dicts and lists, and a key that names a secret hides its whole value."""
    if key and key not in _SAFE_KEYS and _SECRET_KEY.search(key) and value not in (None, "", [], {}):
        return REDACTED
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: scrub_value(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(item) for item in value]
    return value


# Formatters ------------------------------------------------------------------------------------


class JsonFormatter(_BaseJsonFormatter):
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message, the context fields
    where known, any `extra` fields, and exc_info for an exception. Everything is scrubbed."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger"})
        kwargs.setdefault("timestamp", "time")
        super().__init__("%(levelname)s %(name)s %(message)s", **kwargs)

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {name: scrub_value(value, key=name) for name, value in log_data.items()}


class TextFormatter(logging.Formatter):
    """`2026-08-02 10:00:00,123 INFO approvals.pipeline: proposal created [request_id=… preview_id=…]`."""

    def __init__(self, fmt: str | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(fmt or "%(asctime)s %(levelname)s %(name)s: %(message)s", *args, **kwargs)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = " ".join(f"{name}={value}" for name in CONTEXT_FIELDS if (value := getattr(record, name, None)))
        return scrub(f"{line} [{context}]" if context else line)
