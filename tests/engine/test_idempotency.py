"""Idempotency keys on the toy action: the same key and body replays, another body is a 409, a refusal
replays as the same refusal, and a key belongs to one agent session."""

import json

from approvals.models import AuditRecord, IdempotencyRecord, Preview
from tests.conftest import agent_client_for

from .conftest import TOOL, events, rename
from .factories import BoardFactory


def test_the_same_key_and_body_replays_the_first_answer_and_creates_nothing(board, agent):
    first = rename(agent, headers={"Idempotency-Key": "rename-1"})
    second = rename(agent, headers={"Idempotency-Key": "rename-1"})

    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json() == first.json()
    preview = Preview.objects.get()
    record = IdempotencyRecord.objects.get()
    assert (record.key, record.agent_session, record.response_status) == ("rename-1", agent.agent_session, 201)
    assert record.response_body["preview"]["id"] == str(preview.pk)
    # The replay never reached the policy again: one proposal, no repetition audited.
    assert events(preview) == ["proposed"]


def test_the_same_key_with_another_body_is_409_and_the_first_still_replays(board, agent):
    first = rename(agent, headers={"Idempotency-Key": "rename-1"}, title="Plans")
    conflict = rename(agent, headers={"Idempotency-Key": "rename-1"}, title="Other plans")

    assert first.status_code == 201
    assert conflict.status_code == 409, conflict.content
    body = conflict.json()
    assert (body["ok"], body["executed"], body["error"]["code"]) == (False, False, "idempotency_key_reused")
    assert "different request body" in body["error"]["message"]
    assert list(Preview.objects.values_list("payload__title", flat=True)) == ["Plans"]
    refused = AuditRecord.objects.filter(event="proposal_invalid").get()
    assert json.loads(refused.raw_arguments) == {"board_id": "b-1", "title": "Other plans"}
    assert refused.result["error"]["code"] == "idempotency_key_reused"
    again = rename(agent, headers={"Idempotency-Key": "rename-1"}, title="Plans")
    assert again.status_code == 200
    assert again.json()["preview"]["id"] == first.json()["preview"]["id"]


def test_a_refusal_under_a_key_replays_as_the_same_refusal(board, agent):
    first = rename(agent, headers={"Idempotency-Key": "k"}, title="Roadmap")
    second = rename(agent, headers={"Idempotency-Key": "k"}, title="Roadmap")

    assert (first.status_code, second.status_code) == (422, 422)
    assert second.json() == first.json()
    assert first.json()["error"]["code"] == "title_unchanged"
    assert Preview.objects.count() == 0
    assert AuditRecord.objects.filter(event="proposal_refused").count() == 1


def test_a_key_belongs_to_one_agent_session(board, agent, stranger):
    BoardFactory(id="b-9", owner=stranger, title="Oscar's")
    other = agent_client_for(stranger, tools=(TOOL,))

    mine = rename(agent, headers={"Idempotency-Key": "same"})
    theirs = rename(other, board_id="b-9", headers={"Idempotency-Key": "same"})

    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["preview"]["id"] != theirs.json()["preview"]["id"]
    assert IdempotencyRecord.objects.filter(key="same").count() == 2
