from __future__ import annotations

from django import template

from approvals.core.money import format_minor

register = template.Library()


@register.simple_tag
def money(amount_minor: int | None, currency: str | None) -> str:
    """{% money 500 "EUR" %} → €5.00; nothing for a preview without an amount (no "0.00")."""
    if amount_minor is None or not currency:
        return ""
    return format_minor(amount_minor, currency)
