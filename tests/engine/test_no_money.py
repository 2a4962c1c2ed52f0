"""An action declares money or has none (Action.proposes_amount is False by default): the toy action's
previews show no amount anywhere (the agent API, its schema, the console queue), the quorum and the
spending limits leave it alone, and the engine's words about its effect name the action's own performer
and reference, never "the provider"."""

from unittest import mock

import pytest
from drf_spectacular.generators import SchemaGenerator

from approvals.core.errors import ExecutionFailure
from approvals.core.presentation import preview_state_words
from approvals.core.registry import Action, Proposal
from approvals.models import ApprovalRole, Execution, PreviewStatus
from tests.toy_action.actions import RenameBoardAction

from .conftest import html, logged_in, proposed, rename, text_of
from .test_console import awaiting_staff
from .test_execution import confirm


def test_an_action_proposes_no_amount_unless_it_declares_one():
    assert Action.proposes_amount is False  # the engine's default
    assert "proposes_amount" not in vars(RenameBoardAction)  # the toy relies on it


def test_a_rename_preview_has_no_amount_in_the_agent_api_or_its_schema(board, agent):
    body = rename(agent).json()

    assert "amount_minor" not in body["preview"] and "currency" not in body["preview"]
    schemas = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    assert set(schemas["RenameBoardPreview"]["properties"]).isdisjoint({"amount_minor", "currency"})
    assert {"amount_minor", "currency"} <= set(schemas["RefundOrderPreview"]["properties"])


def test_the_queue_of_a_reviewer_of_renames_only_has_no_amount_column_and_no_currency_filter(board, agent, reviewer):
    awaiting_staff(agent)

    page = html(logged_in(reviewer).get("/console/"))

    assert 'data-label="Amount"' not in page
    assert ">Amount</th>" not in page
    assert 'name="currency"' not in page
    assert "amount" not in text_of(page).lower()


def test_the_queue_of_a_reviewer_of_refunds_keeps_its_amount_column(board, agent, reviewer):
    from django.contrib.auth.models import Permission

    reviewer.user_permissions.add(Permission.objects.get(codename="review_refund_order"))

    page = html(logged_in(reviewer).get("/console/"))

    assert ">Amount</th>" in page and 'name="currency"' in page


def test_the_quorum_does_not_apply_to_an_action_without_money(board, agent, settings):
    settings.REVIEW_QUORUM = "rename_board:*:0:3"

    preview = proposed(agent)

    assert preview.required_approvals == [ApprovalRole.CUSTOMER]
    assert preview.staff_approvals_needed == 1
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER


def test_the_spending_limits_do_not_apply_to_an_action_without_money(board, agent, settings, monkeypatch):
    # Even an action that says its amounts are money going out spends nothing without declaring money.
    monkeypatch.setattr(RenameBoardAction, "counts_toward_spending_limits", True)
    settings.SPEND_LIMIT_CUSTOMER_30D = "*:1"
    settings.SPEND_LIMIT_AGENT_DAILY = "*:1"

    first, second = rename(agent, title="First"), rename(agent, title="Second")

    assert (first.status_code, second.status_code) == (201, 201), second.json()


def test_an_action_without_money_that_proposes_an_amount_is_a_programming_error(board, agent, monkeypatch):
    propose = RenameBoardAction.propose

    def with_an_amount(self, *, actor, arguments):
        proposal = propose(self, actor=actor, arguments=arguments)
        return Proposal(**{**proposal.__dict__, "amount_minor": 500, "currency": "EUR"})

    monkeypatch.setattr(RenameBoardAction, "propose", with_an_amount)

    with pytest.raises(ValueError, match="proposes_amount"):
        rename(agent)


def test_a_refused_effect_is_told_in_the_actions_words_not_the_providers(
    board, agent, reviewer, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(RenameBoardAction, "effect_performer", "the board service")
    preview = proposed(agent)
    refused = ExecutionFailure("The board service keeps this title.", code="title_kept")

    with (
        mock.patch.object(RenameBoardAction, "perform", side_effect=refused),
        django_capture_on_commit_callbacks(execute=True),
    ):
        confirm(preview)

    preview.refresh_from_db()
    assert Execution.objects.get().outcome == "failed_after_check"
    said = [preview_state_words(preview, audience)[1] for audience in ("agent", "customer", "staff")]
    assert said[0].startswith("Rename board b-1 to “Plans for 2027”: failed, the board service refused it")
    assert said[2].startswith("The board service refused it for good (title_kept)")
    page = text_of(html(logged_in(reviewer).get(f"/console/previews/{preview.pk}/")))
    assert "refused by the board service" in page
    for text in [*said, page]:
        assert "provider" not in text.lower() and "refund" not in text.lower(), text


def test_the_console_names_the_effect_by_the_actions_reference(
    board, agent, reviewer, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(RenameBoardAction, "effect_reference", lambda self, effect: f"rename of {effect['title']}")
    preview = proposed(agent)
    with django_capture_on_commit_callbacks(execute=True):
        confirm(preview)

    page = text_of(html(logged_in(reviewer).get(f"/console/previews/{preview.pk}/")))

    assert "rename of Plans for 2027" in page
