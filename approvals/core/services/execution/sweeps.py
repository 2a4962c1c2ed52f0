"""The sweeper and the resolver: publish again what no worker is doing, and look up unknown effects."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from approvals.core.registry import registry
from approvals.core.services.execution.opening import execution_dispatch
from approvals.core.services.execution.state import (
    Outcome,
)
from approvals.models import (
    Execution,
)

# The sweeper, the resolver and people ----------------------------------------------------------


def executions_dispatch_stalled(*, older_than_seconds: int | None = None) -> int:
    """Publish again what no worker is doing: a pending execution whose task was lost (broker down,
    web process killed), and an attempt whose lease expired (its worker died). The attempt that
    takes over gets a new fencing token and looks the effect up before making one."""
    wait = settings.EXECUTION_STALL_SECONDS if older_than_seconds is None else older_than_seconds
    now = timezone.now()
    pending = Execution.objects.filter(outcome=Outcome.PENDING, updated_at__lte=now - timedelta(seconds=wait))
    expired = Execution.objects.filter(outcome=Outcome.IN_PROGRESS, lease_expires_at__lte=now)
    ids = [
        *pending.order_by("updated_at").values_list("pk", flat=True),
        *expired.order_by("lease_expires_at").values_list("pk", flat=True),
    ]
    return sum(execution_dispatch(pk) for pk in ids)


def executions_resolve_unknown(*, older_than_seconds: int | None = None) -> int:
    """The resolver's sweep: publish an attempt for each execution whose effect is unknown and whose
    action can look effects up; the attempt looks first and never makes a second effect."""
    wait = settings.EXECUTION_RESOLVE_INTERVAL_SECONDS if older_than_seconds is None else older_than_seconds
    cutoff = timezone.now() - timedelta(seconds=wait)
    unknown = (
        Execution.objects.filter(outcome=Outcome.EFFECT_UNKNOWN, updated_at__lte=cutoff)
        .select_related("preview")
        .order_by("updated_at")
    )
    count = 0
    for execution in unknown:
        action = registry.action(execution.preview.action)
        if action is not None and action.can_look_up_effect:
            count += execution_dispatch(execution.pk)
    return count
