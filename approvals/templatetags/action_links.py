"""The actions' own pages in the engine's templates (Action.customer_home, Action.console_links):
engine templates never name an action's URL."""

from __future__ import annotations

from typing import Any

from django import template

from approvals.models import Preview
from approvals.registry import Link, registry

register = template.Library()


@register.simple_tag(takes_context=True)
def customer_homes(context: dict[str, Any]) -> list[Link]:
    """{% customer_homes as homes %}: where the signed-in person sees their things, per action."""
    return registry.customer_homes(context["user"])


@register.simple_tag(takes_context=True)
def customer_home_of(context: dict[str, Any], preview: Preview) -> Link | None:
    """{% customer_home_of preview as home %}: where the person sees the things of this preview's action."""
    action = registry.action(preview.action)
    return action.customer_home(context["user"]) if action is not None else None


@register.simple_tag(takes_context=True)
def console_links(context: dict[str, Any]) -> list[Link]:
    """{% console_links as links %}: the actions' console pages this staff member may use."""
    return registry.console_links(context["user"])
