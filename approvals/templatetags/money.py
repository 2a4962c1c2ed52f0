from django import template

from approvals.money import format_minor

register = template.Library()


@register.simple_tag
def money(amount_minor: int, currency: str) -> str:
    """{% money 500 "EUR" %} → €5.00"""
    return format_minor(amount_minor, currency)
