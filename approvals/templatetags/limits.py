from django import template

from approvals.core.limits import LimitUse, agent_session_limit_use
from approvals.models import AgentSession

register = template.Library()


@register.filter
def limit_use(session: AgentSession) -> list[LimitUse]:
    """Each configured spending limit of the session with what it used (approvals.core.limits)."""
    return agent_session_limit_use(session)
