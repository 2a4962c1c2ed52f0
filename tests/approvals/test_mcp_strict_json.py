"""MCP messages are held to the REST API's JSON rules (duplicate keys refused), and the audit keeps the
arguments' text as received, not a re-serialisation (issue 30)."""

import json

import pytest
from django.test import Client

from approvals.core.services import agent_session_create
from approvals.models import AuditEvent, AuditRecord, Preview
from tests.factories import OrderFactory, UserFactory

META = (
    '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
)


@pytest.fixture
def token(db):
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    _session, token = agent_session_create(user=alice, tools=["refund_order"])
    return token


def call(token: str, params: str, name: str = "refund_order"):
    body = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{' + params + "," + META + "}}"
    return Client().post(
        "/mcp",
        data=body.encode(),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_ACCEPT="application/json, text/event-stream",
        HTTP_MCP_PROTOCOL_VERSION="2026-07-28",
        HTTP_MCP_METHOD="tools/call",
        HTTP_MCP_NAME=name,
    )


def test_duplicate_keys_in_the_arguments_are_refused_and_audited_as_received(token):
    arguments = '{"order_id":"o-12","amount_minor":99999,"amount_minor":500,"reason":"damaged"}'
    response = call(token, f'"name":"refund_order","arguments":{arguments}')
    result = response.json()["result"]
    assert result["isError"] is True
    error = result["structuredContent"]["error"]
    assert error["code"] == "invalid_arguments"
    assert "Duplicate key 'amount_minor'" in error["message"]
    assert Preview.objects.count() == 0
    record = AuditRecord.objects.get(event=AuditEvent.PROPOSAL_INVALID)
    assert record.raw_arguments == arguments and record.action == "refund_order"


def test_a_duplicate_key_in_the_envelope_is_a_parse_error_and_audited(token):
    arguments = '{"order_id":"o-12","amount_minor":500,"reason":"damaged"}'
    params = f'"name":"no_such_tool","name":"refund_order","arguments":{arguments}'
    response = call(token, params)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700
    assert "Duplicate key 'name'" in response.json()["error"]["message"]
    assert Preview.objects.count() == 0
    record = AuditRecord.objects.get(event=AuditEvent.PROPOSAL_INVALID)
    assert params in record.raw_arguments  # the body as received
    assert record.result["error"]["code"] == "malformed_request"


def test_the_audit_keeps_the_arguments_text_as_received(token):
    arguments = '{ "order_id" : "o-12",\n  "amount_minor": 500, "reason":"damaged" }'
    result = call(token, f'"name":"refund_order","arguments":{arguments}').json()["result"]
    assert result["isError"] is False and result["structuredContent"]["status"] == "awaiting_customer"
    preview = Preview.objects.get()
    assert preview.amount_minor == 500
    assert AuditRecord.objects.get(event=AuditEvent.PROPOSED, preview=preview).raw_arguments == arguments


def test_the_same_arguments_written_differently_are_the_same_implicit_call(token):
    first = call(token, '"name":"refund_order","arguments":{"order_id":"o-12","amount_minor":500,"reason":"damaged"}')
    again = call(
        token, '"name":"refund_order","arguments":{"reason": "damaged", "amount_minor": 500, "order_id": "o-12"}'
    )
    ids = {r.json()["result"]["structuredContent"]["preview"]["id"] for r in (first, again)}
    assert len(ids) == 1 and Preview.objects.count() == 1


def test_a_valid_message_is_not_refused(token):
    response = call(
        token, '"name":"refund_order","arguments":{"order_id":"o-12","amount_minor":500,"reason":"damaged"}'
    )
    assert response.status_code == 200
    assert json.loads(response.content)["result"]["structuredContent"]["ok"] is True
