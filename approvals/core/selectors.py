"""Read helpers of the engine that actions may use."""

from functools import cache
from typing import Any

from django.db import connection
from django.db.models import BigIntegerField, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from approvals.core.registry import registry
from approvals.core.rows import fetch_column, statement_cursor
from approvals.models import (
    EFFECT_IN_FLIGHT_OUTCOMES,
    OPEN_STATUSES,
    Execution,
    ExecutionOutcome,
    Preview,
    PreviewStatus,
)


@cache
def _amount_in_flight_sql(*, excluding: bool) -> str:
    quote = connection.ops.quote_name
    previews, executions = quote(Preview._meta.db_table), quote(Execution._meta.db_table)
    outcomes = ", ".join(["%s"] * len(EFFECT_IN_FLIGHT_OUTCOMES))
    sql = (
        f"SELECT COALESCE(SUM(p.amount_minor), 0) FROM {previews} p JOIN {executions} e ON e.preview_id = p.id "
        f"WHERE p.subject_id = %s AND p.subject_type = %s AND e.outcome IN ({outcomes})"
    )
    return sql + " AND p.id <> %s" if excluding else sql


def _amount_in_flight_params(subject_type: str) -> list[Any]:
    return [subject_type, *(outcome.value for outcome in EFFECT_IN_FLIGHT_OUTCOMES)]


def amount_in_flight(*, subject_type: str, subject_id: str, exclude: Any = None) -> int:
    """What executions in flight take from the subject: the amounts of its previews whose outside effect
    may already exist but is not recorded yet (in progress, unknown, or made and not recorded). One
    statement whose SQL is built once: it is asked on every proposal and every execution."""
    params: list[Any] = [subject_id, *_amount_in_flight_params(subject_type)]
    if exclude is not None:
        pk = Preview._meta.pk
        params.append(pk.get_db_prep_value(pk.to_python(exclude), connection))
    with statement_cursor() as cursor:
        cursor.execute(_amount_in_flight_sql(excluding=exclude is not None), params)
        return int(cursor.fetchone()[0])


def amount_in_flight_column(*, subject_type: str, subject_id: str) -> tuple[str, list[Any]]:
    """amount_in_flight as a scalar subquery (SQL and parameters) to read in the same statement as the
    subject (Action.proposal_subject_columns)."""
    return _amount_in_flight_sql(excluding=False), [subject_id, *_amount_in_flight_params(subject_type)]


def amount_in_flight_expression(*, subject_type: str, subject_id_field: str) -> Coalesce:
    """amount_in_flight as an expression over the subjects of the caller's own query (its field holding
    the subject id), to annotate them with: the subject and what is in flight on it in one query."""
    in_flight = (
        Preview.objects.filter(
            subject_type=subject_type,
            subject_id=OuterRef(subject_id_field),
            execution__outcome__in=EFFECT_IN_FLIGHT_OUTCOMES,
        )
        .order_by()
        .values("subject_id")
        .annotate(total=Sum("amount_minor"))
        .values("total")
    )
    return Coalesce(Subquery(in_flight), Value(0), output_field=BigIntegerField())


# What staff see of executions ------------------------------------------------------------------


def execution_staff_step(preview: Preview, execution: Execution | None) -> str:
    """What staff can do for this execution: "retry" (nothing was done; start again with every
    check), "resolve" (look the effect up now), "verdict" (the action cannot look up: a person says
    whether it happened), "record" (record a made effect again), or "" (nothing)."""
    if preview.status != PreviewStatus.NEEDS_ATTENTION or execution is None:
        return ""
    if execution.outcome == ExecutionOutcome.REFUSED_BEFORE_EFFECT:
        return "retry"
    if execution.outcome == ExecutionOutcome.EFFECT_UNKNOWN:
        action = registry.action(preview.action)
        return "resolve" if action is not None and action.can_look_up_effect else "verdict"
    if execution.outcome == ExecutionOutcome.EFFECT_UNRECORDED:
        return "record"
    return ""


def executions_of(previews: list[Preview]) -> dict[Any, Execution]:
    return {e.pk: e for e in Execution.objects.filter(pk__in=[p.pk for p in previews])}


@cache
def _open_siblings_sql() -> str:
    quote = connection.ops.quote_name
    statuses = ", ".join(["%s"] * len(OPEN_STATUSES))
    return (
        f"SELECT {quote('id')} FROM {quote(Preview._meta.db_table)} WHERE subject_type = %s AND subject_id = %s "
        f"AND agent_session_id = %s AND status IN ({statuses}) AND {quote('id')} <> %s ORDER BY created_at, id"
    )


def session_open_siblings(preview: Preview) -> list[Any]:
    """The ids of the other open previews (waiting, or approved) that the preview's agent session proposed on
    the same subject, oldest first: executing any one of them supersedes the rest
    (approvals.core.services.execution.siblings). Every proposal's answer asks it: one statement whose
    SQL is built once."""
    if preview.agent_session_id is None:
        return []
    pk = Preview._meta.pk
    params = [preview.subject_type, preview.subject_id, preview.agent_session_id, *(s.value for s in OPEN_STATUSES)]
    params.append(pk.get_db_prep_value(preview.pk, connection))
    return fetch_column(Preview, "id", _open_siblings_sql(), params)
