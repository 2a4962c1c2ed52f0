"""The agent API against its own OpenAPI schema (schemathesis, in process through the WSGI app).

Every operation of /api/schema/ is fuzzed with positive and negative data: no answer may be a
server error, and every answer must be documented (status code, content type, headers, body
schema). Then one request per documented answer is sent on purpose and validated the same way,
so the 201/200/401/403/404/409/415/422/429 bodies are checked, not only the ones fuzzing hits.

`transactional_db`: requests go through the real WSGI handler, which closes the database
connection after each request as in production; a test transaction would not survive that.
"""

import os
import secrets
import uuid

import pytest
import schemathesis
from django.core.cache import cache
from django.test import Client
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    missing_required_header,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from approvals.models import AgentSession, Preview
from config.wsgi import application
from invoices.models import Invoice, InvoiceContact, InvoiceLine, InvoiceStatus
from tests.conftest import agent_client_for
from tests.factories import OrderFactory, UserFactory

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
# The credentials are real ones, made per test; schemathesis probes missing and invalid ones itself
# (`ignored_auth`, `missing_required_header`) instead of generating random bearer tokens.
schema.config.generation.update(with_security_parameters=False)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
    missing_required_header,
    unsupported_method,
]
# Not `positive_data_acceptance`: a well-formed call for an order the person does not have is a
# 422 policy refusal by contract, which that check would count as "valid data rejected".

# Per operation; SCHEMATHESIS_MAX_EXAMPLES=2000 for a long hunt.
MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "50"))
TOOL_CALLS = "/api/agent/tool-calls"
GOOD = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}


class Shop:
    """A customer with an order and an invoice, an agent token for both tools, and a browser login."""

    def __init__(self):
        self.user = UserFactory(username="fuzz")
        OrderFactory(number="o-12", customer=self.user, currency="EUR", total_minor=1000)
        invoice = Invoice.objects.create(
            number="INV-17", customer=self.user, currency="EUR", status=InvoiceStatus.ISSUED, total_minor=12000
        )
        InvoiceLine.objects.create(invoice=invoice, position=1, description="Consulting", quantity=1, unit_minor=12000)
        InvoiceContact.objects.create(invoice=invoice, email="billing@example.test")
        agent = agent_client_for(self.user, tools=("refund_order", "send_invoice"))
        self.session = agent.agent_session
        self.token = agent.token
        browser = Client()
        browser.force_login(self.user)
        self.csrf = secrets.token_hex(16)  # 32 characters, sent as cookie and header (the unmasked form)
        self.cookies = {"sessionid": browser.cookies["sessionid"].value, "csrftoken": self.csrf}

    def headers(self, **extra):
        """Bearer token for the agent endpoints; session cookie and CSRF for POST /api/agent/sessions."""
        return {
            "Authorization": f"Bearer {self.token}",
            "X-CSRFToken": self.csrf,
            **extra,
        }


@pytest.fixture
def shop(transactional_db):
    shop = Shop()
    # Throttle counters are keyed by session id, and ids repeat between tests.
    cache.delete(f"throttle_agent_{shop.session.pk}")
    yield shop
    cache.delete(f"throttle_agent_{shop.session.pk}")


@schema.parametrize()
@hypothesis_settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_operation_gives_a_server_error_or_an_undocumented_answer(case, shop):
    case.call_and_validate(headers=shop.headers(), cookies=shop.cookies, checks=CHECKS)


# Every documented answer, on purpose ------------------------------------------------------------


def call(
    shop, path, method, *, body=None, query=None, path_parameters=None, headers=None, cookies=None, media_type=None
):
    """One request built by hand, sent and validated like a generated one."""
    kwargs = {
        "headers": shop.headers() if headers is None else headers,
        "query": query,
        "path_parameters": path_parameters,
    }
    if body is not None:
        kwargs["body"] = body
    if media_type is not None:
        kwargs["media_type"] = media_type
    case = schema[path][method].Case(**kwargs)
    response = case.call(cookies=shop.cookies if cookies is None else cookies)
    case.validate_response(response, checks=CHECKS)
    return response


def propose(shop, body, **headers):
    return call(shop, TOOL_CALLS, "POST", body=body, headers=shop.headers(**headers))


def test_every_documented_answer_of_a_tool_call_matches_the_schema(shop, settings):
    created = propose(shop, {"name": "refund_order", "arguments": GOOD, "call_id": "c-1"})
    assert created.status_code == 201
    assert created.json()["call_id"] == "c-1"
    assert propose(shop, {"name": "refund_order", "arguments": GOOD}).status_code == 200  # the same pending one
    invoice = propose(
        shop, {"name": "send_invoice", "arguments": '{"invoice_id": "INV-17", "recipient": "billing@example.test"}'}
    )
    assert invoice.status_code == 201
    assert invoice.json()["preview"]["required_approvals"] == ["staff"]

    refused = propose(shop, {"name": "refund_order", "arguments": {**GOOD, "amount_minor": 5000}, "call_id": "c-2"})
    assert refused.status_code == 422
    assert refused.json()["error"]["remaining_minor"] == 1000
    assert propose(shop, {"name": "refund_order", "arguments": {**GOOD, "amount_minor": "5"}}).status_code == 400
    assert propose(shop, {"name": "refund_everything", "arguments": {}}).status_code == 404

    replayed = [
        propose(shop, {"name": "refund_order", "arguments": {**GOOD, "amount_minor": 7}}, **{"Idempotency-Key": "k-1"})
        for _ in range(2)
    ]
    assert [r.status_code for r in replayed] == [201, 200]
    conflict = propose(
        shop, {"name": "refund_order", "arguments": {**GOOD, "amount_minor": 8}}, **{"Idempotency-Key": "k-1"}
    )
    assert conflict.status_code == 409

    unsupported = call(shop, TOOL_CALLS, "POST", body="name=refund_order", media_type="text/plain")
    assert unsupported.status_code == 415

    unauthorized = call(
        shop,
        TOOL_CALLS,
        "POST",
        body={"name": "refund_order", "arguments": GOOD},
        headers={"Authorization": "Bearer agt_wrong"},
    )
    assert unauthorized.status_code == 401

    AgentSession.objects.filter(pk=shop.session.pk).update(tools=["send_invoice"])
    forbidden = propose(shop, {"name": "refund_order", "arguments": GOOD})
    assert forbidden.status_code == 403

    cache.delete(f"throttle_agent_{shop.session.pk}")
    settings.AGENT_THROTTLE_RATE = "1/min"
    assert call(shop, "/api/agent/tools", "GET").status_code == 200
    throttled = propose(shop, {"name": "refund_order", "arguments": GOOD})
    assert throttled.status_code == 429
    assert throttled.headers["retry-after"] == [str(throttled.json()["error"]["retry_after_seconds"])]


def test_every_documented_answer_of_the_other_operations_matches_the_schema(shop):
    plain = call(shop, "/api/agent/tools", "GET")
    openai = call(shop, "/api/agent/tools", "GET", query={"format": "openai"})
    assert [t["name"] for t in plain.json()["tools"]] == ["refund_order", "send_invoice"]
    assert [t["function"]["name"] for t in openai.json()] == ["refund_order", "send_invoice"]
    assert call(shop, "/api/agent/tools", "GET", query={"format": "xml"}).status_code == 400
    for output, names in [
        ("openai-responses", lambda body: [t["name"] for t in body]),
        ("anthropic", lambda body: [t["name"] for t in body]),
        ("mcp", lambda body: [t["name"] for t in body["tools"]]),
        ("gemini", lambda body: [d["name"] for d in body[0]["functionDeclarations"]]),
    ]:
        assert names(call(shop, "/api/agent/tools", "GET", query={"format": output}).json()) == [
            "refund_order",
            "send_invoice",
        ]

    preview_id = propose(shop, {"name": "refund_order", "arguments": GOOD}).json()["preview"]["id"]
    for status, update in [
        ("awaiting_customer", {}),
        ("failed", {"status": "failed", "failure_code": "gateway_declined", "failure_reason": "Card closed."}),
        ("executed", {"status": "executed", "result": {"refund_id": "re_1"}}),
    ]:
        Preview.objects.filter(pk=preview_id).update(**update)
        answer = call(shop, "/api/agent/previews/{preview_id}", "GET", path_parameters={"preview_id": preview_id})
        assert answer.status_code == 200
        assert answer.json()["status"] == status
    missing = call(shop, "/api/agent/previews/{preview_id}", "GET", path_parameters={"preview_id": str(uuid.uuid4())})
    assert missing.status_code == 404
    receipt = call(shop, "/api/agent/previews/{preview_id}/receipt", "GET", path_parameters={"preview_id": preview_id})
    assert receipt.status_code == 200 and receipt.json()["preview"] == preview_id
    assert (
        call(
            shop, "/api/agent/previews/{preview_id}/receipt", "GET", path_parameters={"preview_id": str(uuid.uuid4())}
        ).status_code
        == 404
    )
    waited = call(
        shop, "/api/agent/previews/{preview_id}", "GET", path_parameters={"preview_id": preview_id}, query={"wait": 1}
    )
    assert waited.status_code == 200 and waited.json()["status"] == "executed"
    assert (
        call(
            shop,
            "/api/agent/previews/{preview_id}",
            "GET",
            path_parameters={"preview_id": preview_id},
            query={"wait": -1},
        ).status_code
        == 400
    )
    listed = call(shop, "/api/agent/previews", "GET", query={"status": "executed,awaiting_staff"})
    assert listed.status_code == 200 and preview_id in [item["preview"]["id"] for item in listed.json()["results"]]
    assert call(shop, "/api/agent/previews", "GET", query={"status": "nonsense"}).status_code == 400

    withdrawing = "/api/agent/previews/{preview_id}/withdraw"
    pending_id = propose(shop, {"name": "refund_order", "arguments": {**GOOD, "amount_minor": 9}}).json()["preview"]
    withdrawn = call(shop, withdrawing, "POST", path_parameters={"preview_id": pending_id["id"]})
    assert withdrawn.status_code == 200 and withdrawn.json()["status"] == "withdrawn"
    decided = call(shop, withdrawing, "POST", path_parameters={"preview_id": preview_id})
    assert decided.status_code == 409 and decided.json()["error"]["status"] == "executed"
    assert call(shop, withdrawing, "POST", path_parameters={"preview_id": str(uuid.uuid4())}).status_code == 404

    minted = call(shop, "/api/agent/sessions", "POST", body={"tools": ["refund_order"], "ttl_seconds": 60})
    assert minted.status_code == 201
    assert call(shop, "/api/agent/sessions", "POST", body={"tools": ["refund_everything"]}).status_code == 403
    assert call(shop, "/api/agent/sessions", "POST", body={"ttl_seconds": 1}).status_code == 400
    assert call(shop, "/api/agent/sessions", "POST", body={}, headers={}, cookies={}).status_code == 403  # no login
    assert call(shop, "/api/agent/sessions", "POST", body={}, headers={}).status_code == 403  # no CSRF token
    assert (
        call(
            shop,
            "/api/agent/sessions",
            "POST",
            body="tools=refund_order",
            media_type="application/x-www-form-urlencoded",
        ).status_code
        == 415
    )
