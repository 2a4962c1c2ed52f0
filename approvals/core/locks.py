"""The one module that takes row locks for the engine's services, always in the same order.

Every transaction that locks more than one of these rows takes them in this order, so that
confirmations, staff decisions, revocations, sweepers and workers wait for each other instead of
deadlocking:

1. agent sessions (`agent_sessions_lock`), in primary-key order;
2. the person (`person_lock`; approvals.core.limits takes the session's and then the person's row, NO KEY);
3. previews (`preview_lock`, `previews_lock`), in primary-key order;
4. the preview's execution (`execution_lock` reads it under its preview's lock: every writer of an
   execution holds that lock first; `execution_row_lock` locks the row itself);
5. the subject, the order or invoice (`subject_lock`, `subject_lock_to_record`, through the action);
6. the subject's other open previews (`sibling_previews_lock`) and their executions
   (`executions_lock`): taken after the subject, against the order, so previews locked elsewhere
   are skipped (SKIP LOCKED) rather than waited for;
7. approvals (approvals.core.services.rights marks a lapsed one), only under their preview's lock.

The execution gate reads the spending limits again without locking the session or the person (that
would take 1 and 2 after 3): their rows are locked only by admissions, which keep the limits.

Audit records are plain inserts and lock nothing that another transaction waits for.
Call these within the caller's transaction: the locks are held until it ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Model, QuerySet

from approvals.core.registry import Action
from approvals.core.rows import fetch_one, fetch_one_joined, statement_cursor
from approvals.models import OPEN_STATUSES, AgentSession, Execution, ExecutionOutcome, Preview

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def agent_sessions_lock(sessions: QuerySet[AgentSession]) -> list[AgentSession]:
    """Lock the sessions (plain FOR UPDATE, in primary-key order). Not NO KEY: it waits for proposals of
    these sessions still in flight (their inserts hold a key-share lock on the session row)."""
    return list(sessions.select_for_update().order_by("pk"))


def spending_rows_lock(*, agent_session: AgentSession | None, person: Any) -> None:
    """Lock what the spending limits are counted on (approvals.core.limits): the agent session's row, then
    the person's, both NO KEY (the preview's own foreign-key checks do not wait for them); either may
    be left out (None) when no limit counts on it."""
    if agent_session is not None:
        list(AgentSession.objects.select_for_update(no_key=True).filter(pk=agent_session.pk).values_list("pk"))
    if person is not None:
        person_lock(person)


def person_lock(person: User) -> None:
    """Lock the person's row, NO KEY: their proposals in flight (which hold key-share locks on it) are
    not waited for, but two mints of agent sessions for the same person are counted one after the other."""
    list(get_user_model().objects.select_for_update(no_key=True).filter(pk=person.pk).values_list("pk", flat=True))


def preview_lock(preview_id: Any, **equals: Any) -> Preview | None:
    """Lock one preview (and only when it also matches `equals`, e.g. `actor_id`); None if there is none.
    It carries `agent_session_revoked` and `agent_session_has_webhook`, read in the same statement."""
    return fetch_one(Preview, lock=True, extra=_preview_session_facts(), id=preview_id, **equals)


def previews_lock(previews: QuerySet[Preview], *, skip_locked: bool = False, limit: int | None = None) -> list[Preview]:
    """Lock the previews in primary-key order (skipping those locked elsewhere, with `skip_locked`),
    at most `limit` of them."""
    locked = previews.select_for_update(skip_locked=skip_locked).order_by("pk")
    return list(locked[:limit] if limit is not None else locked)


@cache
def _session_revoked_sql() -> tuple[str, list[Any]]:
    """Whether the preview's agent session was revoked, read in the same statement as the preview."""
    quote = connection.ops.quote_name
    sessions, previews = quote(AgentSession._meta.db_table), quote(Preview._meta.db_table)
    return (f"(SELECT s.revoked_at IS NOT NULL FROM {sessions} s WHERE s.id = {previews}.agent_session_id)", [])


@cache
def _session_has_webhook_sql() -> tuple[str, list[Any]]:
    """Whether the preview's agent session has a webhook URL (false without a session): the transition's
    webhook listener is then not queued at all (approvals.agents.webhooks.may_have_webhook)."""
    quote = connection.ops.quote_name
    sessions, previews = quote(AgentSession._meta.db_table), quote(Preview._meta.db_table)
    url = quote(AgentSession._meta.get_field("webhook_url").column)
    return (
        f"COALESCE((SELECT s.{url} <> '' FROM {sessions} s WHERE s.id = {previews}.agent_session_id), false)",
        [],
    )


def _preview_session_facts() -> dict[str, tuple[str, Sequence[Any]]]:
    return {"agent_session_revoked": _session_revoked_sql(), "agent_session_has_webhook": _session_has_webhook_sql()}


def execution_lock(preview_id: Any) -> tuple[Preview, Execution] | None:
    """Lock the preview and read its execution with it, in one statement: what every step of an attempt
    starts with; None when there is either no preview or no execution.

    Both rows are locked, so that the execution read is its newest version after waiting for the
    preview (rows.fetch_one_joined says why). Every writer of an execution holds its preview's lock
    first, so the execution's own lock never waits. The preview carries `agent_session_revoked` and
    `agent_session_has_webhook`, read in the same statement.
    """
    return fetch_one_joined(Preview, Execution, lock=True, extra=_preview_session_facts(), id=preview_id)


def execution_row_lock(preview: Preview) -> Execution | None:
    """Lock the execution of a preview this transaction has locked already (a person's retry)."""
    return fetch_one(Execution, lock=True, preview_id=preview.pk)


def subject_lock(action: Action, preview: Preview) -> Model | None:
    """Lock the preview's subject through its action (after the preview), as the preview's actor may act
    on it now; None if it disappeared or is no longer theirs."""
    return action.lock_subject(preview)


def subject_lock_to_record(action: Action, preview: Preview) -> Model | None:
    """Lock the subject of an effect already made, whoever it belongs to now (after the preview)."""
    return action.lock_subject_to_record(preview)


@cache
def _sibling_ids_sql(*, lock: bool) -> str:
    quote = connection.ops.quote_name
    table, executions = quote(Preview._meta.db_table), quote(Execution._meta.db_table)
    statuses = ", ".join(["%s"] * len(OPEN_STATUSES))
    sql = (
        f"SELECT id FROM {table} WHERE subject_type = %s AND subject_id = %s AND status IN ({statuses}) "
        "AND id <> %s AND subject_version <> %s "
        # One whose execution started may have moved money: it completes.
        f"AND NOT EXISTS (SELECT 1 FROM {executions} e WHERE e.preview_id = {table}.id "
        "AND e.outcome NOT IN (%s, %s)) "
        "ORDER BY id"
    )
    return sql + f" FOR UPDATE OF {table} SKIP LOCKED" if lock else sql


def sibling_previews_lock(preview: Preview, *, new_version: int) -> list[Any]:
    """Lock (skipping those locked elsewhere) the subject's other open previews whose execution has not
    started, made against another version than `new_version`; their ids in order.

    They are locked after the subject, against the order above: one locked by another transaction was
    locked before it waited for the subject, so waiting for it here would deadlock. That transaction
    checks the subject version once it gets the subject, and supersedes the preview itself.
    """
    pk = Preview._meta.pk
    params = [
        preview.subject_type,
        preview.subject_id,
        *(status.value for status in OPEN_STATUSES),
        pk.get_db_prep_value(preview.pk, connection),
        new_version,
        ExecutionOutcome.PENDING.value,
        ExecutionOutcome.AWAITING_APPROVAL.value,  # it waits for an approval again: nothing was done
    ]
    with statement_cursor() as cursor:
        cursor.execute(_sibling_ids_sql(lock=connection.features.has_select_for_update_skip_locked), params)
        return [row[0] for row in cursor.fetchall()]


def executions_lock(preview_ids: Iterable[Any]) -> dict[Any, Execution]:
    """Lock the executions of previews this transaction has locked already, by preview id."""
    locked = Execution.objects.select_for_update().filter(pk__in=list(preview_ids)).order_by("pk")
    return {execution.pk: execution for execution in locked}
