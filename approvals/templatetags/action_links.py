"""The actions' own pages in the engine's templates (Action.customer_home, Action.console_links):
engine templates never name an action's URL."""

from __future__ import annotations

from typing import Any

from django import template

from approvals.core.registry import Link, registry
from approvals.models import Preview

register = template.Library()


@register.simple_tag(takes_context=True)
def customer_homes(context: dict[str, Any]) -> list[Link]:
    """{% customer_homes as homes %}: where the signed-in person sees their things, per action."""
    user = context.get("user")
    return registry.customer_homes(user) if user is not None else []


@register.simple_tag(takes_context=True)
def customer_home_of(context: dict[str, Any], preview: Preview) -> Link | None:
    """{% customer_home_of preview as home %}: where the person sees the things of this preview's action."""
    action, user = registry.action(preview.action), context.get("user")
    return action.customer_home(user) if action is not None and user is not None else None


@register.simple_tag(takes_context=True)
def console_links(context: dict[str, Any]) -> list[Link]:
    """{% console_links as links %}: the actions' console pages this staff member may use."""
    user = context.get("user")
    return registry.console_links(user) if user is not None else []
