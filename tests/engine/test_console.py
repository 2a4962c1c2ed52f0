"""The console on an action with no money: the queue lists a rename waiting for staff, the review page
shows the action's display rows, facts and rules, and nowhere an amount."""

import re

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole

from .conftest import html, logged_in, proposed, text_of

MONEY = re.compile(r"(\d\.\d\d\b|[€$£¥])")


def awaiting_staff(agent, title="Official roadmap"):
    preview = proposed(agent, title=title)
    preview_approve(preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    preview.refresh_from_db()
    return preview


def queue_row(page: str, preview) -> str:
    row = re.search(rf'<tr class="queue-row[^"]*" data-preview="{preview.pk}".*?</tr>', page, re.S)
    assert row, page
    return row.group(0)


def test_the_queue_lists_a_rename_waiting_for_staff_in_words(board, agent, reviewer):
    preview = awaiting_staff(agent)
    proposed(agent, title="Not for staff")  # the owner alone decides this one: not in the staff queue

    response = logged_in(reviewer).get("/console/")

    assert response.status_code == 200
    page = html(response)
    assert page.count('class="queue-row') == 1
    row = queue_row(page, preview)
    assert "Rename board b-1 to “Official roadmap”" in row
    assert "olive" in row and "olive@example.test" in row
    assert agent.agent_session.token_prefix in row
    assert f'value="{preview.pk}:{preview.digest}:1"' in row  # the tick carries id, digest and version
    assert 'class="status-word status-awaiting_staff"' in row
    assert "Waiting for staff review" in text_of(row)


def test_the_queue_shows_no_amount_for_an_action_without_money(board, agent, reviewer):
    preview = awaiting_staff(agent)

    row = queue_row(html(logged_in(reviewer).get("/console/")), preview)

    assert not MONEY.search(text_of(row)), text_of(row)


def test_the_queue_finds_a_rename_by_board_owner_and_title(board, agent, reviewer):
    preview = awaiting_staff(agent)
    console = logged_in(reviewer)

    for query in ("b-1", "olive", "official ROAD", str(preview.pk)):
        page = html(console.get("/console/", {"q": query}))
        assert f'data-preview="{preview.pk}"' in page, query
    assert 'class="queue-row' not in html(console.get("/console/", {"q": "nobody-here"}))


def test_the_review_page_shows_the_display_rows_facts_and_rules_and_no_amount(board, agent, reviewer):
    preview = awaiting_staff(agent)

    response = logged_in(reviewer).get(f"/console/previews/{preview.pk}/")

    assert response.status_code == 200
    page = html(response)
    assert "Rename board b-1 to “Official roadmap”" in page
    for label, value in (("Board", "b-1"), ("Current title", "Roadmap"), ("New title", "Official roadmap")):
        assert f"<dt>{label}</dt><dd>{value}</dd>" in page
    assert "<dt>Owner</dt><dd>olive</dd>" in page  # review_facts, from the database
    assert "1 now, 1 when proposed" in page
    assert "Board belongs to the proposer" in page and "Board is not archived" in page  # policy_evaluation
    assert f'action="/console/previews/{preview.pk}/approve"' in page
    assert f'name="digest" value="{preview.digest}"' in page
    assert not MONEY.search(text_of(page)), [m.group(0) for m in MONEY.finditer(text_of(page))]
    assert "amount" not in text_of(page).lower()


def test_an_executed_rename_reads_as_done_in_the_console(board, agent, reviewer, django_capture_on_commit_callbacks):
    preview = awaiting_staff(agent)
    console = logged_in(reviewer)
    with django_capture_on_commit_callbacks(execute=True):
        console.post(f"/console/previews/{preview.pk}/approve", {"digest": preview.digest})

    page = html(console.get(f"/console/previews/{preview.pk}/"))

    assert 'data-status="executed"' in page
    assert "Board b-1 is now called “Official roadmap”." in page
    assert "reference rename_board:" in page
    executed = html(console.get("/console/", {"state": "executed"}))
    assert f'data-preview="{preview.pk}"' in executed
