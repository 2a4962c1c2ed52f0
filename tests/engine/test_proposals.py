"""Proposals through the agent API, on an action with no money: a preview (201), a refusal with its code
and message (422), the same pending proposal again (200), malformed arguments (400), and the tool list."""

import json

from approvals.core.arguments import input_json_schema
from approvals.models import AuditRecord, IdempotencyRecord, Preview, PreviewStatus
from tests.toy_action.models import Board
from tests.toy_action.serializers import RenameBoardArguments

from .conftest import TOOL, events, rename


def proposal_records():
    return AuditRecord.objects.exclude(event="agent_session_created").order_by("id")


def test_a_rename_becomes_a_preview_waiting_for_the_owner_and_nothing_changes(board, owner, agent):
    response = rename(agent, title="Plans for 2027")

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["ok"], body["executed"], body["status"], body["outcome"]) == (
        True,
        False,
        "awaiting_customer",
        None,
    )
    fields = body["preview"]
    assert fields["action"] == TOOL
    assert (fields["board_id"], fields["title"], fields["previous_title"]) == ("b-1", "Plans for 2027", "Roadmap")
    assert fields["required_approvals"] == ["customer"]
    assert fields["executed"] is False
    assert fields["confirm_url"] == f"http://testserver/previews/{fields['id']}/"
    # No money anywhere in what the agent is told.
    assert "amount_minor" not in fields and "currency" not in fields
    assert body["message"].startswith("Rename board b-1 to “Plans for 2027”: nothing has happened yet.")
    assert fields["confirm_url"] in body["message"]

    preview = Preview.objects.get()
    assert str(preview.pk) == fields["id"]
    assert (preview.actor, preview.agent_session) == (owner, agent.agent_session)
    assert (preview.subject_type, preview.subject_id, preview.subject_version) == ("board", "b-1", 1)
    assert preview.payload == {"board_id": "b-1", "title": "Plans for 2027", "previous_title": "Roadmap"}
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER
    assert len(preview.digest) == 64

    record = proposal_records().get()
    assert (record.event, record.preview, record.actor, record.agent_session) == (
        "proposed",
        preview,
        owner,
        agent.agent_session,
    )
    assert json.loads(record.raw_arguments) == {"board_id": "b-1", "title": "Plans for 2027"}
    assert record.result["digest"] == preview.digest
    assert Board.objects.get(pk="b-1").title == "Roadmap"
    assert Board.objects.get(pk="b-1").version == 1


def test_a_foreign_board_and_a_missing_one_are_refused_with_the_same_code_and_words(
    board, strangers_board, agent, owner
):
    foreign = rename(agent, board_id="b-2")
    missing = rename(agent, board_id="b-404")

    for response, board_id in ((foreign, "b-2"), (missing, "b-404")):
        assert response.status_code == 422, response.content
        body = response.json()
        assert (body["ok"], body["executed"]) == (False, False)
        assert body["error"] == {
            "code": "board_unavailable",
            "message": f"Board {board_id} is not available: no such board may be renamed by you.",
        }
    assert "Oscar" not in foreign.content.decode()
    assert Preview.objects.count() == 0
    refused = list(proposal_records().values_list("event", "subject_id", "actor", "agent_session"))
    assert refused == [
        ("proposal_refused", "b-2", owner.pk, agent.agent_session.pk),
        ("proposal_refused", "b-404", owner.pk, agent.agent_session.pk),
    ]
    assert proposal_records().first().result["error"]["code"] == "board_unavailable"
    assert Board.objects.get(pk="b-2").title == "Oscar's board"


def test_each_policy_rule_refuses_with_its_own_code_and_a_message_that_says_why(board, agent):
    cases = [
        ({"title": "Roadmap"}, "title_unchanged", "Board b-1 is already called 'Roadmap'."),
        ({"title": "   "}, "title_blank", "The new title is blank"),
    ]
    for arguments, code, words in cases:
        response = rename(agent, **arguments)
        assert response.status_code == 422, response.content
        assert response.json()["error"]["code"] == code
        assert words in response.json()["error"]["message"]

    Board.objects.filter(pk="b-1").update(archived=True)
    response = rename(agent, title="Anything")
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "board_archived",
        "message": "Board b-1 is archived; an archived board keeps its title.",
    }
    assert Preview.objects.count() == 0
    assert list(proposal_records().values_list("event", flat=True)) == ["proposal_refused"] * 3


def test_the_same_pending_proposal_again_is_200_with_the_same_preview(board, agent):
    first = rename(agent)
    again = rename(agent)

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["preview"]["id"] == first.json()["preview"]["id"]
    assert again.json()["status"] == "awaiting_customer"
    preview = Preview.objects.get()
    assert events(preview) == ["proposed", "proposal_repeated"]
    # Another title is another proposal.
    other = rename(agent, title="Something else")
    assert other.status_code == 201
    assert Preview.objects.count() == 2


def test_a_title_with_the_review_word_needs_staff_after_the_owner(board, agent, settings):
    response = rename(agent, title="Official roadmap")

    assert response.status_code == 201
    body = response.json()
    assert body["preview"]["required_approvals"] == ["customer", "staff"]
    assert body["message"].endswith("A staff member will review it after the customer confirms.")
    preview = Preview.objects.get()
    # A staff queue is worked in hours: the preview waits at least the staff review window.
    window = (preview.expires_at - preview.created_at).total_seconds()
    assert window >= max(settings.PREVIEW_TTL_SECONDS, settings.STAFF_REVIEW_TTL_SECONDS) - 5


def test_malformed_arguments_are_400_audited_and_make_no_preview(board, agent):
    answers = [
        agent.post(
            "/api/agent/tool-calls",
            {"name": TOOL, "arguments": {"board_id": "b-1", "title": "Plans", "colour": "red"}},
            format="json",
        ),
        rename(agent, title="x" * 101),
        agent.post("/api/agent/tool-calls", {"name": TOOL, "arguments": {"board_id": "b-1"}}, format="json"),
        agent.post("/api/agent/tool-calls", {"name": TOOL, "arguments": {"board_id": 1, "title": "P"}}, format="json"),
    ]

    for response in answers:
        assert response.status_code == 400, response.content
        body = response.json()
        assert (body["ok"], body["executed"], body["error"]["code"]) == (False, False, "invalid_arguments")
    assert Preview.objects.count() == 0
    assert IdempotencyRecord.objects.count() == 0
    assert set(proposal_records().values_list("event", flat=True)) == {"proposal_invalid"}
    assert Board.objects.get(pk="b-1").title == "Roadmap"


def test_the_session_lists_the_tool_with_the_schema_of_the_serializer_that_parses_it(agent):
    response = agent.get("/api/agent/tools")

    assert response.status_code == 200
    tools = response.json()["tools"]
    assert [tool["name"] for tool in tools] == [TOOL]  # the session's own tools, not every installed one
    assert tools[0]["input_schema"] == input_json_schema(RenameBoardArguments)
    assert set(tools[0]["input_schema"]["properties"]) == {"board_id", "title"}
    assert tools[0]["input_schema"]["additionalProperties"] is False
    assert "confirms the exact new title" in tools[0]["description"]
