"""What the agent reads back: its session's previews, filtered by status, and another person's preview
as if it did not exist."""

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole
from tests.conftest import agent_client_for

from .conftest import TOOL, proposed
from .factories import BoardFactory


def test_the_session_lists_its_own_previews_newest_first_and_by_status(
    board, agent, stranger, django_capture_on_commit_callbacks
):
    done = proposed(agent, title="Done title")
    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=done.pk, approver=done.actor, role=ApprovalRole.CUSTOMER, digest=done.digest)
    waiting = proposed(agent, title="Waiting title")
    BoardFactory(id="b-5", owner=stranger)
    proposed(agent_client_for(stranger, tools=(TOOL,)), board_id="b-5", title="Not yours")

    listing = agent.get("/api/agent/previews").json()

    assert [row["preview"]["id"] for row in listing["results"]] == [str(waiting.pk), str(done.pk)]
    assert [(row["status"], row["executed"]) for row in listing["results"]] == [
        ("awaiting_customer", False),
        ("executed", True),
    ]
    assert (listing["page"], listing["next"], listing["previous"]) == (1, None, None)
    executed = agent.get("/api/agent/previews", {"status": "executed"}).json()["results"]
    assert [row["preview"]["title"] for row in executed] == ["Done title"]


def test_another_persons_preview_is_404_for_the_agent(board, agent, stranger):
    BoardFactory(id="b-5", owner=stranger)
    theirs = proposed(agent_client_for(stranger, tools=(TOOL,)), board_id="b-5", title="Not yours")

    response = agent.get(f"/api/agent/previews/{theirs.pk}")

    assert response.status_code == 404
    assert response.json()["ok"] is False
    assert "Not yours" not in response.content.decode()
