"""Seed 000, "Whose refund is it?": the replay of Alice's session, against the real agent API.

A valid tool call is a proposal. The actor comes from the token, the currency from the order,
and the outcome reported back from the executor, never from what the assistant said.
"""

import json

import pytest

from approvals.core.services import preview_approve, preview_execute
from approvals.models import ApprovalRole, AuditRecord, Preview, PreviewStatus
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.conftest import propose

OWN_CALL = {"name": "refund_order", "arguments": '{"order_id":"o-12","amount_minor":500,"reason":"damaged"}'}
FRIEND_CALL = {"name": "refund_order", "arguments": '{"order_id":"o-17","amount_minor":500,"reason":"damaged"}'}
FRIEND_REPLY = {"refundIssued": True}


def call(client, tool_call, **kwargs):
    return client.post("/api/agent/tool-calls", tool_call, format="json", **kwargs)


def preview_status(client, preview_id):
    return client.get(f"/api/agent/previews/{preview_id}")


def test_alices_own_call_with_a_string_argument_is_a_preview_in_euros(alice_agent, o12):
    response = call(alice_agent, OWN_CALL)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["ok"] is True
    assert body["executed"] is False
    assert body["status"] == "awaiting_customer"
    preview_json = body["preview"]
    assert preview_json["order_id"] == "o-12"
    assert preview_json["amount_minor"] == 500
    assert preview_json["currency"] == "EUR"
    assert preview_json["reason"] == "damaged"
    assert preview_json["executed"] is False
    assert "USD" not in response.content.decode()
    assert "€5.00" in body["message"]

    preview = Preview.objects.get()
    assert str(preview.id) == preview_json["id"]
    assert preview.actor == o12.customer
    assert preview.subject_id == "o-12"
    assert preview.currency == "EUR"
    assert preview.payload == {"order_id": "o-12", "amount_minor": 500, "currency": "EUR", "reason": "damaged"}
    assert preview.subject_version == o12.version
    assert Refund.objects.count() == 0

    record = AuditRecord.objects.get(event="proposed")
    assert record.preview == preview
    assert record.raw_arguments == OWN_CALL["arguments"]
    assert record.agent_session == alice_agent.agent_session


def test_an_explicit_currency_argument_is_refused_not_ignored(alice_agent, o12):
    arguments = '{"order_id":"o-12","amount_minor":500,"reason":"damaged","currency":"USD"}'
    response = call(alice_agent, {"name": "refund_order", "arguments": arguments})

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_arguments"
    assert "currency" in error["fields"]
    assert response.json()["executed"] is False
    assert Preview.objects.count() == 0
    assert Refund.objects.count() == 0
    record = AuditRecord.objects.get(event="proposal_invalid")
    assert record.raw_arguments == arguments
    assert record.preview is None


def test_the_friends_order_from_alices_session_is_unavailable_and_nothing_is_recorded(alice_agent, o12, o17):
    response = call(alice_agent, FRIEND_CALL)

    assert response.status_code == 422, response.content
    body = response.json()
    assert body["ok"] is False
    assert body["executed"] is False
    assert body["error"]["code"] == "order_unavailable"
    assert "o-17" in body["error"]["message"]
    # Nothing about Bob's order leaks: not its currency, not what remains.
    assert "USD" not in response.content.decode()
    assert "remaining_minor" not in body["error"]
    assert Preview.objects.count() == 0
    assert Refund.objects.count() == 0
    assert LocalGatewayRefund.objects.count() == 0
    o17.refresh_from_db()
    assert (o17.refunded_minor, o17.version) == (0, 1)
    record = AuditRecord.objects.get(event="proposal_refused")
    assert record.raw_arguments == FRIEND_CALL["arguments"]
    assert record.actor == o12.customer
    assert record.result["error"]["code"] == "order_unavailable"


def test_a_foreign_order_and_a_missing_one_get_byte_identical_answers(alice_agent, o12, o17):
    foreign = call(alice_agent, FRIEND_CALL)
    Order.objects.filter(pk=o17.pk).delete()
    missing = call(alice_agent, FRIEND_CALL)

    assert foreign.status_code == missing.status_code == 422
    assert foreign.content == missing.content
    assert foreign["Content-Type"] == missing["Content-Type"]
    assert Preview.objects.count() == 0


def test_bobs_own_call_on_o17_succeeds_in_dollars(bob_agent, o12, o17):
    response = call(bob_agent, FRIEND_CALL)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["preview"]["order_id"] == "o-17"
    assert body["preview"]["currency"] == "USD"
    assert body["executed"] is False
    preview = Preview.objects.get()
    assert preview.actor == o17.customer
    assert preview.currency == "USD"


def test_bob_cannot_refund_alices_order_either(bob_agent, o12, o17):
    response = call(bob_agent, OWN_CALL)

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "order_unavailable"
    assert Preview.objects.count() == 0


def test_alice_and_bob_see_the_same_tool_description(alice_agent, bob_agent, o12, o17):
    for query in ("", "?format=openai"):
        alice_tools = alice_agent.get(f"/api/agent/tools{query}")
        bob_tools = bob_agent.get(f"/api/agent/tools{query}")
        assert alice_tools.status_code == bob_tools.status_code == 200
        assert alice_tools.content == bob_tools.content


def test_same_description_same_arguments_different_customer_different_answer(alice_agent, bob_agent, o12, o17):
    denied = call(alice_agent, FRIEND_CALL)
    assert denied.status_code == 422
    assert Refund.objects.count() == 0
    allowed = call(bob_agent, FRIEND_CALL)
    assert allowed.status_code == 201
    own = call(alice_agent, OWN_CALL)
    assert own.status_code == 201

    previews = {p.subject_id: p for p in Preview.objects.all()}
    assert set(previews) == {"o-12", "o-17"}
    assert previews["o-12"].currency == "EUR"
    assert previews["o-12"].actor == o12.customer
    assert previews["o-17"].currency == "USD"
    assert previews["o-17"].actor == o17.customer


def test_the_agents_claimed_reply_cannot_be_sent_as_part_of_the_call(alice_agent, o12):
    response = alice_agent.post("/api/agent/tool-calls", {**OWN_CALL, "result": FRIEND_REPLY}, format="json")
    assert response.status_code == 400
    assert "result" in response.json()["error"]["fields"]
    assert Preview.objects.count() == 0


@pytest.mark.parametrize("claim", ["confirmed", "customer_confirmed", "approved", "refundIssued"])
def test_the_customers_consent_is_not_a_tool_argument(alice_agent, o12, claim):
    arguments = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged", claim: True}
    response = propose(alice_agent, **arguments)
    assert response.status_code == 400
    assert claim in response.json()["error"]["fields"]
    assert Preview.objects.count() == 0


def test_the_reported_outcome_comes_from_the_executor(alice_agent, alice, o12):
    proposed = call(alice_agent, OWN_CALL)
    assert proposed.status_code == 201
    preview_id = proposed.json()["preview"]["id"]

    # The assistant may claim a refund was recorded; the gateway says nothing has happened.
    before = preview_status(alice_agent, preview_id)
    assert before.status_code == 200
    body = before.json()
    assert body["ok"] is True
    assert body["executed"] is False
    assert body["status"] == "awaiting_customer"
    assert body["preview"]["executed"] is False
    assert "result" not in body["preview"]
    assert "nothing has happened yet" in body["message"]
    assert json.dumps({"refundIssued": body["executed"]}) == '{"refundIssued": false}'

    preview = Preview.objects.get(pk=preview_id)
    preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)

    # Approved is not executed: the worker has not run (on_commit does not fire inside a test transaction).
    approved = preview_status(alice_agent, preview_id).json()
    assert approved["status"] == "approved"
    assert approved["executed"] is False
    assert "not completed" in approved["message"]
    assert Refund.objects.count() == 0

    executed = preview_execute(preview_id=preview.pk)
    assert executed.status == PreviewStatus.EXECUTED

    after = preview_status(alice_agent, preview_id).json()
    assert after["ok"] is True
    assert after["executed"] is True
    assert after["status"] == "executed"
    assert after["preview"]["executed"] is True
    result = after["preview"]["result"]
    assert result["currency"] == "EUR"
    assert result["amount_minor"] == 500
    assert result["refund_id"]

    refund = Refund.objects.get()
    assert refund.order == o12
    assert refund.preview_id == preview.pk
    assert (refund.amount_minor, refund.currency, refund.reason) == (500, "EUR", "damaged")
    assert refund.gateway_refund_id == result["refund_id"]
    assert result["refund_id"] in after["message"]
    gateway = LocalGatewayRefund.objects.get()
    assert (gateway.idempotency_key, gateway.currency, gateway.amount_minor) == (f"refund:{preview.pk}", "EUR", 500)
    o12.refresh_from_db()
    assert o12.refunded_minor == 500
    assert o12.version == 2
    assert AuditRecord.objects.filter(event="executed", preview=preview).count() == 1

    # Running the worker again moves no more money.
    preview_execute(preview_id=preview.pk)
    assert Refund.objects.count() == 1
    assert LocalGatewayRefund.objects.count() == 1


def test_bobs_refund_executes_in_dollars_and_alices_ledger_stays_empty(bob_agent, bob, o12, o17):
    proposed = call(bob_agent, FRIEND_CALL)
    preview = Preview.objects.get(pk=proposed.json()["preview"]["id"])
    preview_approve(preview_id=preview.pk, approver=bob, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    preview_execute(preview_id=preview.pk)

    body = preview_status(bob_agent, preview.pk).json()
    assert body["executed"] is True
    assert body["preview"]["result"]["currency"] == "USD"
    refund = Refund.objects.get()
    assert (refund.order, refund.currency, refund.amount_minor) == (o17, "USD", 500)
    assert not Refund.objects.filter(order=o12).exists()


def test_alice_cannot_read_bobs_preview(alice_agent, bob_agent, o12, o17):
    bobs = call(bob_agent, FRIEND_CALL).json()["preview"]["id"]
    response = preview_status(alice_agent, bobs)
    assert response.status_code == 404
    assert "o-17" not in response.content.decode()
