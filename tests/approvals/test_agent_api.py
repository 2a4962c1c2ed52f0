"""The agent API contract (DESIGN.md): tools, strict tool calls, idempotency, preview status, sessions."""

import json
import uuid
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from approvals.agents.api.formats import strict_openai_schema
from approvals.core.arguments import input_json_schema
from approvals.core.digests import sha256_hex
from approvals.core.services import preview_decline
from approvals.models import AgentSession, ApprovalRole, AuditRecord, IdempotencyRecord, Preview, PreviewStatus
from refunds.models import Refund
from refunds.serializers import RefundOrderArguments
from tests.conftest import agent_client_for, propose
from tests.factories import UserFactory

TOOL_CALLS = "/api/agent/tool-calls"
GOOD = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}


def post_raw(client, body: str, **kwargs):
    return client.post(TOOL_CALLS, data=body, content_type="application/json", **kwargs)


def proposal_records():
    """Audit rows written for tool calls (not the session creation)."""
    return AuditRecord.objects.exclude(event="agent_session_created").order_by("id")


def assert_nothing_but_an_invalid_record(response, *, status=400):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["ok"] is False
    assert body["executed"] is False
    assert body["error"]["code"]
    assert body["error"]["message"]
    assert Preview.objects.count() == 0
    assert Refund.objects.count() == 0
    assert IdempotencyRecord.objects.count() == 0
    record = proposal_records().get()
    assert record.event == "proposal_invalid"
    assert record.preview is None
    assert record.result["error"]["code"] == body["error"]["code"]
    return record


def walk_keys(value):
    if isinstance(value, dict):
        for key, child in value.items():
            yield key
            yield from walk_keys(child)
    elif isinstance(value, list):
        for child in value:
            yield from walk_keys(child)


# GET /api/agent/tools ------------------------------------------------------------------------


def test_tools_lists_refund_order_with_its_input_schema(alice_agent):
    response = alice_agent.get("/api/agent/tools")

    assert response.status_code == 200
    tools = response.json()["tools"]
    assert [t["name"] for t in tools] == ["refund_order"]
    tool = tools[0]
    assert set(tool) == {"name", "description", "input_schema"}
    assert "preview" in tool["description"]
    schema = tool["input_schema"]
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"order_id", "amount_minor", "reason"}
    assert schema["properties"]["order_id"]["type"] == "string"
    assert schema["properties"]["amount_minor"]["type"] == "integer"
    assert schema["properties"]["reason"]["type"] == "string"
    assert schema["properties"]["reason"]["enum"] == ["damaged", "late", "unwanted"]
    assert sorted(schema["required"]) == ["amount_minor", "order_id", "reason"]
    assert schema["additionalProperties"] is False
    assert "currency" not in schema["properties"]
    assert "currency" not in schema["required"]
    assert "default" not in set(walk_keys(schema))


def test_the_schema_is_generated_from_the_serializer_that_parses_the_call(alice_agent):
    listed = alice_agent.get("/api/agent/tools").json()["tools"][0]["input_schema"]
    assert listed == input_json_schema(RefundOrderArguments)
    assert set(listed["properties"]) == set(RefundOrderArguments().fields)


def test_tools_in_openai_format(alice_agent):
    plain = alice_agent.get("/api/agent/tools").json()["tools"][0]
    response = alice_agent.get("/api/agent/tools", {"format": "openai"})

    assert response.status_code == 200
    tools = response.json()
    assert isinstance(tools, list)
    assert len(tools) == 1
    assert tools[0] == {
        "type": "function",
        "function": {
            "name": "refund_order",
            "description": plain["description"],
            "parameters": strict_openai_schema(plain["input_schema"]),
            "strict": True,
        },
    }
    assert "default" not in set(walk_keys(tools))
    # Strict mode's subset: the bounds and lengths the parser enforces are said in words instead.
    assert {"maximum", "minimum", "maxLength", "minLength", "format"}.isdisjoint(set(walk_keys(tools)))
    parameters = tools[0]["function"]["parameters"]
    assert parameters["properties"]["order_id"]["description"].endswith("1 to 64 characters.")


def test_tools_lists_only_the_sessions_tools(alice):
    client = agent_client_for(alice)
    AgentSession.objects.filter(pk=client.agent_session.pk).update(tools=[])

    response = client.get("/api/agent/tools")

    assert response.status_code == 200
    assert response.json() == {"tools": []}
    assert client.get("/api/agent/tools", {"format": "openai"}).json() == []


# Authentication -------------------------------------------------------------------------------


def _expired(client):
    AgentSession.objects.filter(pk=client.agent_session.pk).update(expires_at=timezone.now() - timedelta(seconds=1))


def _revoked(client):
    AgentSession.objects.filter(pk=client.agent_session.pk).update(revoked_at=timezone.now())


def _inactive(client):
    type(client.agent_session.user).objects.filter(pk=client.agent_session.user_id).update(is_active=False)


def _no_header(client):
    client.credentials()


def _bad_token(client):
    client.credentials(HTTP_AUTHORIZATION="Bearer agt_not-a-real-token")


def _token_without_keyword(client):
    client.credentials(HTTP_AUTHORIZATION=client.token)


def _three_parts(client):
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {client.token} extra")


def _hash_as_token(client):
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {client.agent_session.token_hash}")


@pytest.mark.parametrize(
    "spoil",
    [_no_header, _bad_token, _token_without_keyword, _three_parts, _hash_as_token, _expired, _revoked, _inactive],
)
def test_no_valid_token_is_401_with_www_authenticate(alice, o12, spoil):
    client = agent_client_for(alice)
    own = propose(client, **GOOD).json()["preview"]["id"]
    spoil(client)

    answers = [
        client.get("/api/agent/tools"),
        propose(client, **GOOD),
        client.get(f"/api/agent/previews/{own}"),
    ]

    for response in answers:
        assert response.status_code == 401, response.content
        assert response["WWW-Authenticate"] == (
            'Bearer realm="agent", resource_metadata="http://testserver/.well-known/oauth-protected-resource"'
        )
        body = response.json()
        assert body["ok"] is False
        assert body["error"]["code"] in {"not_authenticated", "authentication_failed"}
        assert "o-12" not in response.content.decode()
    assert Preview.objects.count() == 1
    assert proposal_records().filter(event="proposed").count() == 1
    assert proposal_records().count() == 1


def test_a_browser_login_is_not_an_agent_token(alice, o12):
    client = APIClient()
    client.force_login(alice)

    assert client.get("/api/agent/tools").status_code == 401
    assert propose(client, **GOOD).status_code == 401
    assert Preview.objects.count() == 0


def test_an_expired_session_lists_nothing(alice):
    client = agent_client_for(alice, ttl_seconds=60)
    assert client.get("/api/agent/tools").status_code == 200
    _expired(client)
    response = client.get("/api/agent/tools")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "This agent session expired."


# Tool names -----------------------------------------------------------------------------------


def test_unknown_tool_is_404(alice_agent, o12):
    response = propose(alice_agent, name="refund_everything", **GOOD)

    record = assert_nothing_but_an_invalid_record(response, status=404)
    assert response.json()["error"]["code"] == "unknown_tool"
    assert "refund_everything" in response.json()["error"]["message"]
    assert record.action == "refund_everything"
    assert json.loads(record.raw_arguments) == GOOD


@pytest.mark.parametrize("tools", [[], ["send_invoice"]])
def test_a_tool_not_in_the_session_is_403(alice, o12, tools):
    client = agent_client_for(alice)
    AgentSession.objects.filter(pk=client.agent_session.pk).update(tools=tools)

    response = propose(client, **GOOD)

    assert response.status_code == 403, response.content
    body = response.json()
    assert body["ok"] is False
    assert body["executed"] is False
    assert body["error"]["code"] == "tool_not_allowed"
    assert Preview.objects.count() == 0
    record = proposal_records().get()
    assert record.event == "proposal_forbidden"
    assert record.action == "refund_order"
    assert json.loads(record.raw_arguments) == GOOD


# GET /api/agent/previews/<id> -----------------------------------------------------------------


def test_preview_status_of_own_preview(alice_agent, o12):
    proposed = propose(alice_agent, **GOOD).json()
    response = alice_agent.get(f"/api/agent/previews/{proposed['preview']['id']}")

    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["executed"] is False
    assert body["status"] == "awaiting_customer"
    assert body["preview"] == proposed["preview"]
    assert set(body["preview"]) == {
        "id",
        "action",
        "order_id",
        "amount_minor",
        "currency",
        "reason",
        "status",
        "expires_at",
        "required_approvals",
        "confirm_url",
        "executed",
        "origin",
        "outcome",
    }
    assert body["preview"]["origin"] == "agent" and "proposed_by" not in body["preview"]
    assert body["outcome"] is None and body["preview"]["outcome"] is None  # not approved: no execution yet
    assert body["preview"]["required_approvals"] == ["customer"]
    assert body["preview"]["confirm_url"] == f"http://testserver/previews/{proposed['preview']['id']}/"


def test_another_actors_preview_is_404_like_a_random_id(alice_agent, bob_agent, o12, o17):
    bobs = propose(bob_agent, order_id="o-17", amount_minor=500, reason="damaged").json()["preview"]["id"]

    foreign = alice_agent.get(f"/api/agent/previews/{bobs}")
    missing = alice_agent.get(f"/api/agent/previews/{uuid.uuid4()}")

    assert foreign.status_code == missing.status_code == 404
    assert foreign.content == missing.content
    assert foreign.json() == {
        "ok": False,
        "executed": False,
        "error": {"code": "not_found", "message": foreign.json()["error"]["message"]},
    }
    assert foreign.json()["error"]["message"]
    assert bob_agent.get(f"/api/agent/previews/{bobs}").status_code == 200


def test_another_session_of_the_same_person_sees_the_preview(alice, o12):
    first = agent_client_for(alice)
    second = agent_client_for(alice)
    preview_id = propose(first, **GOOD).json()["preview"]["id"]
    assert second.get(f"/api/agent/previews/{preview_id}").status_code == 200


def test_preview_status_reports_an_expired_preview(alice_agent, o12):
    preview_id = propose(alice_agent, **GOOD).json()["preview"]["id"]
    Preview.objects.filter(pk=preview_id).update(expires_at=timezone.now() - timedelta(seconds=1))

    body = alice_agent.get(f"/api/agent/previews/{preview_id}").json()

    assert body["status"] == "expired"
    assert body["executed"] is False
    assert body["preview"]["failure"]["code"] == "expired"
    assert Preview.objects.get().status == PreviewStatus.EXPIRED


def test_preview_status_reports_a_failed_execution_with_its_reason(alice_agent, o12):
    preview_id = propose(alice_agent, **GOOD).json()["preview"]["id"]
    Preview.objects.filter(pk=preview_id).update(
        status=PreviewStatus.FAILED, failure_code="gateway_declined", failure_reason="The card was closed."
    )

    body = alice_agent.get(f"/api/agent/previews/{preview_id}").json()

    assert body["executed"] is False
    assert body["status"] == "failed"
    assert body["preview"]["failure"] == {"code": "gateway_declined", "reason": "The card was closed."}
    assert "The card was closed." in body["message"]


# Idempotency-Key --------------------------------------------------------------------------------


def test_idempotency_replay_returns_the_same_preview_and_creates_nothing(alice_agent, o12):
    first = propose(alice_agent, headers={"Idempotency-Key": "k-1"}, **GOOD)
    second = propose(alice_agent, headers={"Idempotency-Key": "k-1"}, **GOOD)

    assert first.status_code == 201
    assert second.status_code == 200
    assert second.json()["preview"]["id"] == first.json()["preview"]["id"]
    assert second.json() == first.json()
    assert Preview.objects.count() == 1
    assert IdempotencyRecord.objects.get().key == "k-1"
    assert proposal_records().filter(event="proposed").count() == 1


def test_the_same_key_with_a_different_body_is_409_and_creates_nothing(alice_agent, o12):
    first = propose(alice_agent, headers={"Idempotency-Key": "k-1"}, **GOOD)
    changed = {**GOOD, "amount_minor": 600}
    conflict = propose(alice_agent, headers={"Idempotency-Key": "k-1"}, **changed)

    assert first.status_code == 201
    assert conflict.status_code == 409, conflict.content
    body = conflict.json()
    assert body["ok"] is False
    assert body["executed"] is False
    assert body["error"]["code"] == "idempotency_key_reused"
    assert Preview.objects.count() == 1
    assert Preview.objects.get().amount_minor == 500
    record = proposal_records().last()
    assert record.event == "proposal_invalid"
    assert json.loads(record.raw_arguments) == changed
    # The original still replays.
    assert propose(alice_agent, headers={"Idempotency-Key": "k-1"}, **GOOD).status_code == 200


def test_a_different_call_id_is_a_different_body(alice_agent, o12):
    one = {"name": "refund_order", "arguments": GOOD, "call_id": "call_1"}
    two = {"name": "refund_order", "arguments": GOOD, "call_id": "call_2"}
    first = alice_agent.post(TOOL_CALLS, one, format="json", headers={"Idempotency-Key": "k-1"})
    second = alice_agent.post(TOOL_CALLS, two, format="json", headers={"Idempotency-Key": "k-1"})

    assert first.status_code == 201
    assert first.json()["call_id"] == "call_1"
    assert second.status_code == 409


def test_a_refusal_is_replayed_too(alice_agent, o12):
    too_much = {**GOOD, "amount_minor": 5000}
    first = propose(alice_agent, headers={"Idempotency-Key": "k-1"}, **too_much)
    second = propose(alice_agent, headers={"Idempotency-Key": "k-1"}, **too_much)

    assert first.status_code == second.status_code == 422
    # The same answer (PostgreSQL's jsonb keeps the stored body's keys in its own order).
    assert first.json() == second.json()
    assert first.json()["error"]["remaining_minor"] == 1000
    assert Preview.objects.count() == 0


@pytest.mark.parametrize("key", ["", "x" * 256, "has space", "ключ", "tab\tkey"])
def test_invalid_idempotency_keys_are_400(alice_agent, o12, key):
    response = propose(alice_agent, headers={"Idempotency-Key": key}, **GOOD)

    record = assert_nothing_but_an_invalid_record(response)
    assert response.json()["error"]["code"] == "invalid_idempotency_key"
    assert json.loads(record.raw_arguments) == GOOD


def test_a_key_of_255_visible_characters_is_accepted(alice_agent, o12):
    key = "k" * 254 + "~"
    assert propose(alice_agent, headers={"Idempotency-Key": key}, **GOOD).status_code == 201
    assert propose(alice_agent, headers={"Idempotency-Key": key}, **GOOD).status_code == 200
    assert IdempotencyRecord.objects.get().key == key


def test_a_validation_failure_does_not_burn_the_key(alice_agent, o12):
    bad = propose(alice_agent, headers={"Idempotency-Key": "k-1"}, **{**GOOD, "amount_minor": "500"})
    assert bad.status_code == 400
    assert IdempotencyRecord.objects.count() == 0

    fixed = propose(alice_agent, headers={"Idempotency-Key": "k-1"}, **GOOD)
    assert fixed.status_code == 201, fixed.content
    again = propose(alice_agent, headers={"Idempotency-Key": "k-1"}, **GOOD)
    assert again.status_code == 200
    assert again.json()["preview"]["id"] == fixed.json()["preview"]["id"]
    assert Preview.objects.count() == 1


def test_keys_belong_to_one_agent_session(alice, bob, o12, o17):
    alice_client = agent_client_for(alice)
    bob_client = agent_client_for(bob)
    alices = propose(alice_client, headers={"Idempotency-Key": "shared"}, **GOOD)

    # Bob replaying Alice's key and body gets his own answer, not Alice's preview.
    stolen = propose(bob_client, headers={"Idempotency-Key": "shared"}, **GOOD)
    assert alices.status_code == 201
    assert stolen.status_code == 422
    assert stolen.json()["error"]["code"] == "order_unavailable"
    assert alices.json()["preview"]["id"] not in stolen.content.decode()

    bobs = propose(
        bob_client, headers={"Idempotency-Key": "shared"}, order_id="o-17", amount_minor=500, reason="damaged"
    )
    assert bobs.status_code == 409
    assert Preview.objects.count() == 1


# The same pending proposal ---------------------------------------------------------------------


def test_the_same_pending_proposal_twice_returns_the_same_preview(alice_agent, o12):
    first = propose(alice_agent, **GOOD)
    second = alice_agent.post(TOOL_CALLS, {"name": "refund_order", "arguments": json.dumps(GOOD)}, format="json")

    assert first.status_code == 201
    assert second.status_code == 200
    assert second.json()["preview"]["id"] == first.json()["preview"]["id"]
    assert second.json()["status"] == "awaiting_customer"
    assert Preview.objects.count() == 1
    repeated = proposal_records().get(event="proposal_repeated")
    assert repeated.raw_arguments == json.dumps(GOOD)
    assert str(repeated.preview_id) == first.json()["preview"]["id"]


def test_a_different_amount_is_a_new_preview(alice_agent, o12):
    first = propose(alice_agent, **GOOD)
    second = propose(alice_agent, **{**GOOD, "amount_minor": 400})

    assert first.status_code == second.status_code == 201
    assert first.json()["preview"]["id"] != second.json()["preview"]["id"]
    assert Preview.objects.count() == 2


def test_after_a_decline_the_same_proposal_is_a_new_preview(alice_agent, alice, o12):
    first = propose(alice_agent, **GOOD).json()["preview"]["id"]
    preview = Preview.objects.get(pk=first)
    preview_decline(preview_id=preview.pk, person=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)

    again = propose(alice_agent, **GOOD)

    assert again.status_code == 201
    assert again.json()["preview"]["id"] != first
    assert Preview.objects.filter(status="declined").count() == 1


# Strict parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({**GOOD, "currency": "EUR"}, id="extra-field"),
        pytest.param({**GOOD, "user": "bob"}, id="extra-actor"),
        pytest.param({**GOOD, "amount_minor": "500"}, id="amount-string"),
        pytest.param({**GOOD, "amount_minor": 5.0}, id="amount-float"),
        pytest.param({**GOOD, "amount_minor": 5.5}, id="amount-fraction"),
        pytest.param({**GOOD, "amount_minor": -1}, id="amount-negative"),
        pytest.param({**GOOD, "amount_minor": 2**64}, id="amount-huge"),
        pytest.param({**GOOD, "amount_minor": 2**53}, id="amount-unsafe"),
        pytest.param({**GOOD, "amount_minor": True}, id="amount-bool"),
        pytest.param({**GOOD, "amount_minor": None}, id="amount-null"),
        pytest.param({**GOOD, "order_id": 12}, id="order-int"),
        pytest.param({**GOOD, "order_id": ["o-12"]}, id="order-list"),
        pytest.param({**GOOD, "reason": "DAMAGED"}, id="reason-case"),
        pytest.param({**GOOD, "reason": "other"}, id="reason-unknown"),
        pytest.param({**GOOD, "reason": 1}, id="reason-int"),
        pytest.param({"order_id": "o-12", "amount_minor": 500}, id="missing-reason"),
        pytest.param({}, id="missing-all"),
        pytest.param([GOOD], id="list"),
        pytest.param(500, id="number"),
        pytest.param(None, id="null"),
    ],
)
def test_strict_arguments_as_an_object(alice_agent, o12, arguments):
    response = alice_agent.post(TOOL_CALLS, {"name": "refund_order", "arguments": arguments}, format="json")

    record = assert_nothing_but_an_invalid_record(response)
    assert response.json()["error"]["code"] in {"invalid_arguments", "invalid_request"}
    if arguments is None:
        assert record.raw_arguments == ""
    else:
        assert json.loads(record.raw_arguments) == arguments


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"order_id":"o-12","amount_minor":500,"reason":"damaged","currency":"USD"}', id="extra-field"),
        pytest.param('{"order_id":"o-12","amount_minor":"500","reason":"damaged"}', id="amount-string"),
        pytest.param('{"order_id":"o-12","amount_minor":5.0,"reason":"damaged"}', id="amount-float"),
        pytest.param('{"order_id":"o-12","amount_minor":5e2,"reason":"damaged"}', id="amount-exponent"),
        pytest.param('{"order_id":"o-12","amount_minor":-1,"reason":"damaged"}', id="amount-negative"),
        pytest.param('{"order_id":"o-12","amount_minor":18446744073709551616,"reason":"damaged"}', id="amount-huge"),
        pytest.param(
            '{"order_id":"o-12","amount_minor":' + "9" * 5000 + ',"reason":"damaged"}', id="amount-5000-digits"
        ),
        pytest.param('{"order_id":"o-12","amount_minor":true,"reason":"damaged"}', id="amount-bool"),
        pytest.param('{"order_id":"o-12","amount_minor":NaN,"reason":"damaged"}', id="amount-nan"),
        pytest.param('{"order_id":"o-12","amount_minor":Infinity,"reason":"damaged"}', id="amount-infinity"),
        pytest.param('{"order_id":"o-12","amount_minor":500,"amount_minor":5,"reason":"damaged"}', id="duplicate"),
        pytest.param('{"order_id":"o-12","amount_minor":500,"reason":"damaged"', id="truncated"),
        pytest.param("{order_id: 'o-12', amount_minor: 500, reason: 'damaged'}", id="not-json"),
        pytest.param("refund five euros on o-12", id="prose"),
        pytest.param("", id="empty"),
        pytest.param('[{"order_id":"o-12","amount_minor":500,"reason":"damaged"}]', id="list"),
        pytest.param('"{\\"order_id\\":\\"o-12\\"}"', id="double-encoded"),
        pytest.param("null", id="null"),
        pytest.param('{"order_id":"o-12","amount_minor":500}', id="missing-reason"),
        pytest.param("[" * 100 + "]" * 100, id="deep"),
    ],
)
def test_strict_arguments_as_a_string(alice_agent, o12, arguments):
    response = alice_agent.post(TOOL_CALLS, {"name": "refund_order", "arguments": arguments}, format="json")

    record = assert_nothing_but_an_invalid_record(response)
    assert response.json()["error"]["code"] == "invalid_arguments"
    assert record.raw_arguments == arguments
    assert record.action == "refund_order"


@pytest.mark.parametrize(
    "envelope",
    [
        pytest.param({"name": "refund_order", "arguments": GOOD, "currency": "EUR"}, id="unknown-field"),
        pytest.param({"name": "refund_order", "arguments": GOOD, "confirmed": True}, id="consent-field"),
        pytest.param({"arguments": GOOD}, id="missing-name"),
        pytest.param({"name": "refund_order"}, id="missing-arguments"),
        pytest.param({"name": ["refund_order"], "arguments": GOOD}, id="name-list"),
        pytest.param({"name": "refund_order", "arguments": GOOD, "call_id": 7}, id="call-id-int"),
    ],
)
def test_strict_envelope(alice_agent, o12, envelope):
    response = alice_agent.post(TOOL_CALLS, envelope, format="json")

    record = assert_nothing_but_an_invalid_record(response)
    assert response.json()["error"]["code"] == "invalid_request"
    if "arguments" in envelope:
        assert json.loads(record.raw_arguments) == GOOD


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(json.dumps([{"name": "refund_order", "arguments": GOOD}]), id="list"),
        pytest.param('"refund_order"', id="string"),
        pytest.param("null", id="null"),
        pytest.param("500", id="number"),
    ],
)
def test_a_body_that_is_not_an_object(alice_agent, o12, body):
    response = post_raw(alice_agent, body)

    record = assert_nothing_but_an_invalid_record(response)
    assert response.json()["error"]["code"] == "invalid_request"
    assert record.raw_arguments == ""


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            '{"name":"refund_order","arguments":{"order_id":"o-12","amount_minor":NaN,"reason":"damaged"}}', id="nan"
        ),
        pytest.param('{"name":"refund_order","name":"refund_order","arguments":{}}', id="duplicate-key"),
        pytest.param('{"name":"refund_order","arguments":', id="truncated"),
        pytest.param("name=refund_order", id="not-json"),
    ],
)
def test_a_body_that_is_not_json_is_400_and_audited_as_received(alice_agent, o12, body):
    response = post_raw(alice_agent, body)

    record = assert_nothing_but_an_invalid_record(response)
    assert response.json()["error"]["code"] == "malformed_request"
    assert record.raw_arguments == body


def test_an_empty_body_is_400(alice_agent, o12):
    response = post_raw(alice_agent, "")

    assert_nothing_but_an_invalid_record(response)


# Audit of every proposal ----------------------------------------------------------------------


def test_an_accepted_string_argument_is_audited_exactly_as_received(alice_agent, o12):
    raw = '{ "reason": "damaged",\n  "amount_minor": 500, "order_id": "o-12" }'
    response = alice_agent.post(TOOL_CALLS, {"name": "refund_order", "arguments": raw}, format="json")

    assert response.status_code == 201
    record = proposal_records().get()
    assert record.event == "proposed"
    assert record.raw_arguments == raw
    assert str(record.preview_id) == response.json()["preview"]["id"]
    assert record.actor == o12.customer
    assert record.agent_session == alice_agent.agent_session
    assert record.subject_id == "o-12"


def test_an_accepted_object_argument_is_audited_as_the_same_object(alice_agent, o12):
    response = propose(alice_agent, **GOOD)

    assert response.status_code == 201
    record = proposal_records().get()
    assert record.event == "proposed"
    assert json.loads(record.raw_arguments) == GOOD


def test_a_refused_string_argument_is_audited_exactly_as_received(alice_agent, o12):
    raw = '{"order_id":"o-12","amount_minor":24990,"reason":"damaged"}'
    response = alice_agent.post(TOOL_CALLS, {"name": "refund_order", "arguments": raw}, format="json")

    assert response.status_code == 422
    record = proposal_records().get()
    assert record.event == "proposal_refused"
    assert record.raw_arguments == raw
    assert record.preview is None
    assert record.result["error"] == response.json()["error"]


def test_the_call_id_is_echoed(alice_agent, o12):
    envelope = {"name": "refund_order", "arguments": GOOD, "call_id": "call_abc"}
    response = alice_agent.post(TOOL_CALLS, envelope, format="json")
    assert response.status_code == 201
    assert response.json()["call_id"] == "call_abc"

    refused = alice_agent.post(TOOL_CALLS, {**envelope, "arguments": {**GOOD, "order_id": "o-99"}}, format="json")
    assert refused.status_code == 422
    assert refused.json()["call_id"] == "call_abc"


def test_staff_review_above_the_threshold_is_required(alice_agent, alice):
    from tests.factories import OrderFactory

    OrderFactory(number="o-big", customer=alice, currency="EUR", total_minor=50000)
    response = propose(alice_agent, order_id="o-big", amount_minor=10001, reason="damaged")

    assert response.status_code == 201
    assert response.json()["preview"]["required_approvals"] == ["customer", "staff"]
    assert "staff member will review" in response.json()["message"]


# Throttling ------------------------------------------------------------------------------------


def test_a_session_is_throttled(alice_agent, o12):
    cache_key = f"throttle_agent_{alice_agent.agent_session.pk}"
    cache.delete(cache_key)
    try:
        with override_settings(AGENT_THROTTLE_RATE="2/min"):
            assert alice_agent.get("/api/agent/tools").status_code == 200
            assert alice_agent.get("/api/agent/tools").status_code == 200
            response = propose(alice_agent, **GOOD)
        assert response.status_code == 429
        assert response.json()["error"]["code"] == "throttled"
        assert response.json()["error"]["retry_after_seconds"] >= 1
        assert Preview.objects.count() == 0
    finally:
        cache.delete(cache_key)


# POST /api/agent/sessions -----------------------------------------------------------------------


def logged_in_browser(user) -> APIClient:
    client = APIClient(enforce_csrf_checks=True)
    client.get("/accounts/login/")
    token = client.cookies["csrftoken"].value
    response = client.post(
        "/accounts/login/",
        {"username": user.username, "password": "pass-for-tests", "csrfmiddlewaretoken": token},
        format="multipart",
    )
    assert response.status_code == 302, response.content
    return client


def csrf_token(client) -> str:
    return client.cookies["csrftoken"].value


def test_a_logged_in_customer_mints_a_session_for_themselves(alice, o12, o17):
    browser = logged_in_browser(alice)

    response = browser.post(
        "/api/agent/sessions",
        {"tools": ["refund_order"]},
        format="json",
        headers={"X-CSRFToken": csrf_token(browser)},
    )

    assert response.status_code == 201, response.content
    body = response.json()
    token = body["token"]
    assert body["tools"] == ["refund_order"]
    assert body["expires_at"].endswith("Z")
    session = AgentSession.objects.get()
    assert session.user == alice
    assert session.tools == ["refund_order"]
    # Only the hash is stored; the token is in no column of the session or the audit log.
    assert session.token_hash == sha256_hex(token)
    assert session.token_hash != token
    for row in [*AgentSession.objects.values(), *AuditRecord.objects.values()]:
        for value in row.values():
            assert token not in json.dumps(value, default=str)
    assert AuditRecord.objects.filter(event="agent_session_created", actor=alice).count() == 1

    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert agent.get("/api/agent/tools").json()["tools"][0]["name"] == "refund_order"
    own = propose(agent, **GOOD)
    assert own.status_code == 201, own.content
    preview = Preview.objects.get()
    assert preview.actor == alice
    assert preview.agent_session == session
    other = propose(agent, order_id="o-17", amount_minor=500, reason="damaged")
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "order_unavailable"


def test_without_a_tool_list_the_session_gets_every_tool_the_person_may_use(alice):
    browser = logged_in_browser(alice)

    response = browser.post("/api/agent/sessions", {}, format="json", headers={"X-CSRFToken": csrf_token(browser)})

    assert response.status_code == 201, response.content
    assert "refund_order" in response.json()["tools"]
    assert AgentSession.objects.get().tools == response.json()["tools"]


def test_the_session_lifetime_can_be_shortened(alice):
    browser = logged_in_browser(alice)
    before = timezone.now()

    response = browser.post(
        "/api/agent/sessions",
        {"ttl_seconds": 60, "label": "support chat"},
        format="json",
        headers={"X-CSRFToken": csrf_token(browser)},
    )

    assert response.status_code == 201
    session = AgentSession.objects.get()
    assert before + timedelta(seconds=59) <= session.expires_at <= timezone.now() + timedelta(seconds=61)
    assert session.label == "support chat"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({"user": "bob"}, id="actor-in-body"),
        pytest.param({"tools": ["refund_order"], "user_id": 2}, id="actor-id-in-body"),
        pytest.param({"ttl_seconds": "60"}, id="ttl-string"),
        pytest.param({"ttl_seconds": 10**9}, id="ttl-huge"),
        pytest.param({"tools": []}, id="no-tools"),
    ],
)
def test_the_session_request_is_parsed_strictly(alice, bob, payload):
    browser = logged_in_browser(alice)

    response = browser.post("/api/agent/sessions", payload, format="json", headers={"X-CSRFToken": csrf_token(browser)})

    assert response.status_code == 400, response.content
    assert response.json()["ok"] is False
    assert "token" not in response.json()
    assert AgentSession.objects.count() == 0


def test_an_unknown_tool_gets_no_session(alice):
    browser = logged_in_browser(alice)

    response = browser.post(
        "/api/agent/sessions",
        {"tools": ["refund_everything"]},
        format="json",
        headers={"X-CSRFToken": csrf_token(browser)},
    )

    assert response.status_code in (400, 403)
    assert response.json()["error"]["code"] == "unknown_tool"
    assert AgentSession.objects.count() == 0


def test_minting_without_the_csrf_token_is_403(alice):
    browser = logged_in_browser(alice)

    response = browser.post("/api/agent/sessions", {}, format="json")

    assert response.status_code == 403
    assert "token" not in response.json()
    assert AgentSession.objects.count() == 0


def test_minting_with_a_wrong_csrf_token_is_403(alice):
    browser = logged_in_browser(alice)

    response = browser.post("/api/agent/sessions", {}, format="json", headers={"X-CSRFToken": "x" * 32})

    assert response.status_code == 403
    assert AgentSession.objects.count() == 0


def test_anonymous_cannot_mint_a_session(db):
    client = APIClient(enforce_csrf_checks=True)
    client.get("/accounts/login/")

    response = client.post("/api/agent/sessions", {}, format="json", headers={"X-CSRFToken": csrf_token(client)})

    assert response.status_code in (401, 403)
    assert "token" not in response.json()
    assert AgentSession.objects.count() == 0


def test_an_agent_token_cannot_mint_more_tokens(alice_agent):
    response = alice_agent.post("/api/agent/sessions", {}, format="json")

    assert response.status_code in (401, 403)
    assert AgentSession.objects.count() == 1


def test_an_inactive_user_gets_no_session(db):
    user = UserFactory(username="carol")
    browser = logged_in_browser(user)
    type(user).objects.filter(pk=user.pk).update(is_active=False)

    response = browser.post("/api/agent/sessions", {}, format="json", headers={"X-CSRFToken": csrf_token(browser)})

    assert response.status_code in (401, 403)
    assert AgentSession.objects.count() == 0


def test_a_preview_id_that_is_not_a_uuid_gets_the_json_404(alice_agent):
    response = alice_agent.get("/api/agent/previews/not-a-uuid")
    assert response.status_code == 404
    assert response.json() == {"ok": False, "executed": False, "error": {"code": "not_found", "message": "Not found."}}


def test_the_audit_keeps_an_object_arguments_text_as_received(alice_agent, o12):
    sent = '{"name": "refund_order", "arguments": {"order_id":"o-12",   "reason":"damaged","amount_minor":500}}'
    response = alice_agent.generic("POST", TOOL_CALLS, sent, content_type="application/json")

    assert response.status_code == 201, response.json()
    record = proposal_records().get(event="proposed")
    assert record.raw_arguments == '{"order_id":"o-12",   "reason":"damaged","amount_minor":500}'
