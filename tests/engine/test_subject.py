"""The engine owns the subject an action names (Action.subject_model and its fields): the owner-scoped
lookup of a proposal, one refusal for a foreign and a missing subject, the lock before execution that
is the owner's re-check, and the recording of an effect already made whoever owns the subject by then."""

from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.core.errors import PolicyRefusal
from approvals.core.registry import registry
from approvals.models import AuditRecord, Execution, Preview, PreviewStatus
from tests.toy_action.actions import RenameBoardAction
from tests.toy_action.models import Board

from .conftest import events, proposed
from .test_execution import confirm


def test_the_engine_looks_the_subject_up_among_the_actors_own_in_one_query(
    board, strangers_board, owner, django_assert_num_queries
):
    action = registry.action("rename_board")

    with django_assert_num_queries(1):
        assert action.proposal_subject(actor=owner, subject_id="b-1") == board
    for subject_id in ("b-2", "b-404"):
        with pytest.raises(PolicyRefusal) as refused:
            action.proposal_subject(actor=owner, subject_id=subject_id)
        assert refused.value.as_dict() == {
            "code": "board_unavailable",
            "message": f"Board {subject_id} is not available: no such board may be renamed by you.",
        }


class _AskedToo(RenameBoardAction):
    def proposal_subject_columns(self, subject_id):
        return {"asked": ("SELECT %s", [f"asked for {subject_id}"])}


class _AnyBoard(_AskedToo):
    def subject_queryset(self, actor):
        return Board.objects.all()


def test_a_proposal_reads_its_columns_with_the_subject_by_either_lookup(
    board, strangers_board, owner, django_assert_num_queries
):
    own, widened = _AskedToo(), _AnyBoard()
    assert own._plain_own_scope() and not widened._plain_own_scope()  # built once / compiled by the ORM

    with django_assert_num_queries(1):
        found = own.proposal_subject(actor=owner, subject_id="b-1")
    assert (found, found.title, found.owner_id, found.asked) == (board, board.title, owner.pk, "asked for b-1")
    with pytest.raises(PolicyRefusal):
        own.proposal_subject(actor=owner, subject_id="b-2")
    with pytest.raises(PolicyRefusal):
        own.proposal_subject(actor=owner.pk + 1000, subject_id="b-1")  # an owner's id works like the owner
    with django_assert_num_queries(1):
        found = widened.proposal_subject(actor=owner, subject_id="b-2")
    assert (found, found.asked) == (strangers_board, "asked for b-2")


class _ByTitle(RenameBoardAction):
    subject_id_field = "title"


def test_the_locks_around_the_effect_are_built_once_for_a_unique_id_in_the_default_scope(board, strangers_board, owner):
    own, widened = RenameBoardAction(), _AnyBoard()
    assert own._plain_unique_lookup() and widened._plain_unique_lookup()
    assert not _ByTitle()._plain_unique_lookup()  # two boards may share a title: the ORM's first() decides

    with CaptureQueriesContext(connection) as queries:
        assert own.lock_subject(Preview(actor=owner, subject_id="b-1")) == board
        assert own.lock_subject(Preview(actor=owner, subject_id="b-2")) is None  # someone else's now
        assert own.lock_subject(Preview(actor=owner, subject_id="b-404")) is None
        assert own.lock_subject_to_record(Preview(actor=owner, subject_id="b-2")) == strangers_board
        assert widened.lock_subject(Preview(actor=owner, subject_id="b-2")) == strangers_board  # the ORM's

    statements = [query["sql"] for query in queries.captured_queries]
    assert len(statements) == 5
    locking = connection.features.has_select_for_update
    assert all(("FOR UPDATE" in sql) == locking for sql in statements)
    assert ["ORDER BY" in sql for sql in statements] == [False, False, False, False, True]
    where = [sql.partition(" WHERE ")[2] for sql in statements]
    assert '"owner_id" = ' in where[0] and '"owner_id"' not in where[3]  # the recording's: whoever owns it now


def test_a_board_given_to_someone_else_after_the_approval_is_refused_as_unavailable_and_not_renamed(
    board, stranger, agent, django_capture_on_commit_callbacks
):
    preview = proposed(agent)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        confirm(preview)
    # The owner changes and nothing else: the version the preview was made against still matches.
    Board.objects.filter(pk="b-1").update(owner=stranger)

    for callback in callbacks:
        callback()

    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.FAILED, "board_unavailable")
    assert preview.failure_reason == "Board b-1 is not available: no such board may be renamed by you."
    execution = Execution.objects.get()
    assert (execution.outcome, execution.code, execution.effect) == ("refused_before_effect", "board_unavailable", None)
    board.refresh_from_db()
    assert (board.title, board.version, board.owner_id) == ("Roadmap", 1, stranger.pk)
    assert events(preview) == ["proposed", "confirmed", "execution_failed"]
    failed = AuditRecord.objects.get(preview=preview, event="execution_failed")
    assert (failed.result["outcome"], failed.result["code"]) == ("refused_before_effect", "board_unavailable")
    assert failed.result["error"]["message"] == preview.failure_reason


def test_a_board_deleted_after_the_approval_gets_the_same_refusal_as_one_given_away(
    board, agent, django_capture_on_commit_callbacks
):
    preview = proposed(agent)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        confirm(preview)
    Board.objects.filter(pk="b-1").delete()

    for callback in callbacks:
        callback()

    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.FAILED, "board_unavailable")
    assert Execution.objects.get().code == "board_unavailable"


def test_an_effect_made_is_recorded_even_when_the_subject_changed_hands_during_the_effect(
    board, stranger, agent, django_capture_on_commit_callbacks
):
    preview = proposed(agent)
    perform = RenameBoardAction.perform

    def given_away_while_performing(self, *, preview, subject=None):
        Board.objects.filter(pk="b-1").update(owner=stranger)
        return perform(self, preview=preview, subject=subject)

    with (
        mock.patch.object(RenameBoardAction, "perform", given_away_while_performing),
        django_capture_on_commit_callbacks(execute=True),
    ):
        confirm(preview)

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert Execution.objects.get().outcome == "succeeded"
    board.refresh_from_db()
    assert (board.title, board.version, board.owner_id) == ("Plans for 2027", 2, stranger.pk)
    assert events(preview)[-1] == "executed"
