from django import template

from ..limits import LimitUse, agent_session_limit_use
from ..models import AgentSession

register = template.Library()


@register.filter
def limit_use(session: AgentSession) -> list[LimitUse]:
    """Each configured spending limit of the session with what it used (approvals.limits)."""
    return agent_session_limit_use(session)
