"""Words for the staff console: ages and expiry as people say them, audit facts as readable JSON."""

import json
from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

from approvals.models import AWAITING_STATUSES, AuditEvent, Preview

register = template.Library()


@register.filter
def ago(value: datetime | None) -> str:
    """`12 minutes ago`, `just now`, or `in 3 minutes` for a time still to come."""
    if value is None:
        return ""
    now = timezone.now()
    if abs((now - value).total_seconds()) < 60:
        return "just now"
    if value > now:
        return f"in {timeuntil(value, now, depth=1)}"
    return f"{timesince(value, now, depth=1)} ago"


@register.filter
def expiry_words(preview: Preview) -> str:
    """`expires in 3 minutes` while a preview awaits approval; `expired 2 hours ago` once past."""
    if preview.status not in AWAITING_STATUSES:
        return "no longer waiting"
    now = timezone.now()
    if preview.expires_at > now:
        return f"expires in {timeuntil(preview.expires_at, now, depth=1)}"
    return f"expired {timesince(preview.expires_at, now, depth=1)} ago"


@register.filter
def event_words(event: str) -> str:
    try:
        return AuditEvent(event).label
    except ValueError:
        return event


@register.filter
def pretty_json(value: Any) -> str:
    if value in (None, "", {}, []):
        return ""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
