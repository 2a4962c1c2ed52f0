"""The agent API renders its answers through the serializers the OpenAPI schema is generated from: the
rendering must give back exactly the body the shared call path built (every key, in order), so that a
field added to an answer and not to its serializer fails here instead of vanishing from the API."""

import json

from approvals.agents.api.calls import tool_call
from approvals.agents.api.errors import error_body
from approvals.agents.api.serializers import (
    ErrorEnvelopeSerializer,
    PreviewEnvelopeSerializer,
    PreviewPageSerializer,
    answer_data,
    preview_page_data,
)
from approvals.core.presentation import preview_envelope
from approvals.models import Preview
from tests.conftest import propose

BASE_URL = "http://testserver/"
GOOD = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}


def rendered(serializer) -> str:
    return json.dumps(serializer.data)


def call(agent, **overrides):
    kwargs = {
        "session": agent.agent_session,
        "tool_name": "refund_order",
        "arguments": GOOD,
        "call_id": "call-1",
        "idempotency_key": None,
        "base_url": BASE_URL,
    }
    return tool_call(**{**kwargs, **overrides})


def test_a_new_preview_and_the_same_again_render_as_built(alice, o12, alice_agent):
    created = call(alice_agent)
    repeated = call(alice_agent)

    assert (created.http_status, repeated.http_status) == (201, 200)
    for answer in (created, repeated):
        assert list(answer.body) == [
            "ok",
            "executed",
            "status",
            "outcome",
            "preview",
            "message",
            "customer_note",
            "call_id",
        ]
        assert json.dumps(answer_data(answer.body)) == json.dumps(answer.body)


def test_every_refusal_renders_with_all_its_facts(alice, o12, alice_agent):
    answers = [
        call(alice_agent, arguments={**GOOD, "amount_minor": 5000}),  # 422, with remaining_minor
        call(alice_agent, tool_name="no_such_tool"),  # 404
        call(alice_agent, arguments="{not json"),  # 400
        call(alice_agent, idempotency_key="\x01"),  # 400
    ]

    assert [a.http_status for a in answers] == [422, 404, 400, 400]
    assert answers[0].body["error"]["remaining_minor"] == 1000
    for answer in answers:
        assert json.dumps(answer_data(answer.body)) == json.dumps(answer.body)
    bare = error_body("invalid_request", "The tool call envelope is malformed.", fields={"name": ["Required."]})
    assert rendered(ErrorEnvelopeSerializer(bare)) == json.dumps(bare)


def test_a_preview_read_back_and_a_page_render_as_built(alice, o12, alice_agent):
    preview = Preview.objects.get(pk=propose(alice_agent, **GOOD).json()["preview"]["id"])
    envelope = preview_envelope(preview, base_url=BASE_URL)
    page = {"results": [envelope], "page": 1, "next": None, "previous": None}

    assert rendered(PreviewEnvelopeSerializer(envelope)) == json.dumps(envelope)
    assert json.dumps(answer_data(envelope)) == json.dumps(envelope)
    assert rendered(PreviewPageSerializer(page)) == json.dumps(page)
    assert json.dumps(preview_page_data(page)) == json.dumps(page)
