"""Hostile and malformed input at the agent API, throttling, tokens in the wrong place, and leaks.

Each malformed call is a clear 400 (415 for a body that is not JSON at all) with the JSON error
envelope, and nothing is written but the audit record of the refused call. test_agent_api.py
covers the strictness of the arguments themselves; this file goes after the transport: sizes,
nesting, bytes, numbers, unicode, headers, throttling and what a stranger can learn.
"""

import json
import re
import uuid
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from approvals.agents.api.throttling import AgentSessionThrottle
from approvals.models import (
    AgentSession,
    Approval,
    AuditRecord,
    IdempotencyRecord,
    Preview,
    PreviewStatus,
    RejectedCallTally,
)
from invoices.models import Invoice, InvoiceContact, InvoiceLine, InvoiceStatus
from refunds.models import Refund
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory, UserFactory

TOOL_CALLS = "/api/agent/tool-calls"
GOOD = {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}
KEY = {"Idempotency-Key": "hostile-1"}  # sent with every hostile call: no key may be burnt or stored


def post_raw(client, body, content_type="application/json", **headers):
    return client.generic("POST", TOOL_CALLS, body, content_type=content_type, headers={**KEY, **headers})


def envelope_with(arguments_json: str, name: str = "refund_order") -> str:
    return f'{{"name": "{name}", "arguments": {arguments_json}}}'


def amount_arguments(number: str) -> str:
    return '{"order_id": "o-12", "amount_minor": ' + number + ', "reason": "damaged"}'


def proposal_records():
    return AuditRecord.objects.exclude(event="agent_session_created").order_by("id")


def assert_refused_and_only_audited(response, *, status=400, code=None, event="proposal_invalid"):
    """The JSON envelope, nothing created but one audit record of the refused call (whose code it keeps)."""
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["ok"] is False
    assert body["executed"] is False
    assert isinstance(body["error"]["code"], str) and body["error"]["code"]
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body
    assert Preview.objects.count() == 0
    assert Approval.objects.count() == 0
    assert Refund.objects.count() == 0
    if status != 422:  # a policy refusal is an answer, and its key replays it; a malformed call burns no key
        assert IdempotencyRecord.objects.count() == 0
    record = proposal_records().get()
    assert record.event == event
    assert record.preview is None
    assert record.result["error"]["code"] == body["error"]["code"]
    return record


# Size ------------------------------------------------------------------------------------------


def test_a_body_over_the_size_limit_is_400_and_audited_up_to_the_limit(alice_agent, o12, settings):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = envelope_with(json.dumps(GOOD))[:-1] + ', "call_id": "' + "x" * limit + '"}'
    assert len(body.encode()) > limit

    response = post_raw(alice_agent, body)

    record = assert_refused_and_only_audited(response, code="malformed_request")
    assert str(limit) in response.json()["error"]["message"]
    assert record.raw_arguments == body[:limit]


def test_a_body_just_at_the_limit_is_read_and_judged_on_its_content(alice_agent, o12, settings):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    head = envelope_with(json.dumps(GOOD))[:-1] + ', "call_id": "'
    body = head + "x" * (limit - len(head) - 2) + '"}'
    assert len(body.encode()) == limit

    response = post_raw(alice_agent, body)

    assert_refused_and_only_audited(response, code="invalid_request")  # call_id is too long, not the body


def test_the_size_limit_is_read_from_the_settings_at_request_time(alice_agent, o12, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    body = json.dumps({"name": "refund_order", "arguments": GOOD, "call_id": "c" * 100})

    assert_refused_and_only_audited(post_raw(alice_agent, body), code="malformed_request")


def test_a_huge_arguments_string_within_the_limit_is_400_and_audited_exactly(alice_agent, o12):
    arguments = json.dumps({**GOOD, "order_id": "o-12" + "2" * 60_000})
    body = json.dumps({"name": "refund_order", "arguments": arguments})

    record = assert_refused_and_only_audited(post_raw(alice_agent, body), code="invalid_arguments")
    assert record.raw_arguments == arguments
    assert "order_id" in record.result["error"]["fields"]


def test_a_huge_arguments_string_over_the_limit_is_400(alice_agent, o12):
    body = json.dumps({"name": "refund_order", "arguments": "[" + "0," * 40_000 + "0]"})

    assert_refused_and_only_audited(post_raw(alice_agent, body), code="malformed_request")


def test_a_huge_arguments_object_within_the_limit_is_400(alice_agent, o12):
    arguments = {**GOOD, **{f"extra{i}": i for i in range(3000)}}

    response = post_raw(alice_agent, json.dumps({"name": "refund_order", "arguments": arguments}))

    record = assert_refused_and_only_audited(response, code="invalid_arguments")
    assert json.loads(record.raw_arguments) == arguments


# Nesting ---------------------------------------------------------------------------------------


def nested_object(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(envelope_with(nested_object(1000)), id="object-1000-levels"),
        pytest.param(envelope_with("[" * 1000 + "]" * 1000), id="list-1000-levels"),
        pytest.param(envelope_with("[" * 30_000 + "]" * 30_000), id="list-30000-levels"),
        pytest.param(
            envelope_with('{"order_id": ' + nested_object(30) + ', "amount_minor": 5, "reason": "late"}'),
            id="object-30-levels-in-a-field",
        ),
    ],
)
def test_deeply_nested_arguments_are_400(alice_agent, o12, body):
    assert_refused_and_only_audited(post_raw(alice_agent, body), code="malformed_request")


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(nested_object(30), id="object-30-levels"),
        pytest.param(nested_object(1000), id="object-1000-levels"),
        pytest.param("[" * 30_000 + "]" * 30_000, id="list-30000-levels"),
    ],
)
def test_deeply_nested_arguments_as_a_string_are_400(alice_agent, o12, arguments):
    body = json.dumps({"name": "refund_order", "arguments": arguments})

    record = assert_refused_and_only_audited(post_raw(alice_agent, body), code="invalid_arguments")
    assert record.raw_arguments == arguments


def test_the_nesting_limit_is_20_levels(alice_agent, o12):
    # The body is level 1 and `arguments` level 2: an order_id nested 18 deep is 20 levels, 19 deep is 21.
    at_limit = post_raw(alice_agent, envelope_with('{"order_id": ' + nested_object(18) + "}"))
    assert at_limit.status_code == 400
    assert at_limit.json()["error"]["code"] == "invalid_arguments"  # parsed, then refused by the serializer

    over = post_raw(alice_agent, envelope_with('{"order_id": ' + nested_object(19) + "}"))
    assert over.json()["error"]["code"] == "malformed_request"
    assert "nested deeper than 20" in over.json()["error"]["message"]


# Bytes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            b'{"name": "refund_order", "arguments": {"order_id": "o-\xff12", "amount_minor": 5, "reason": "damaged"}}',
            id="invalid-byte",
        ),
        pytest.param(b'{"name": "refund_order\xc0\xaf", "arguments": {}}', id="overlong-encoding"),
        pytest.param(b'{"name": "refund_order", "arguments": {"order_id": "\xed\xa0\x80"}}', id="encoded-surrogate"),
        pytest.param(b'{"name": "refund_order", "arguments": {"order_id": "o-12\xe2\x82"}}', id="truncated-sequence"),
        pytest.param(json.dumps({"name": "refund_order", "arguments": GOOD}).encode("utf-16"), id="utf-16"),
        pytest.param(json.dumps({"name": "refund_order", "arguments": GOOD}).encode("latin-1") + b"\xe9", id="latin-1"),
    ],
)
def test_invalid_utf8_is_400_and_audited_with_replacement_characters(alice_agent, o12, body):
    response = post_raw(alice_agent, body)

    record = assert_refused_and_only_audited(response, code="malformed_request")
    assert "UTF-8" in response.json()["error"]["message"]
    assert record.raw_arguments == body.decode("utf-8", errors="replace").replace("\x00", "\ufffd")


def test_a_byte_order_mark_is_400(alice_agent, o12):
    body = b"\xef\xbb\xbf" + json.dumps({"name": "refund_order", "arguments": GOOD}).encode()

    assert_refused_and_only_audited(post_raw(alice_agent, body), code="malformed_request")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"name": "refund_order", "arguments": {}}\x00', id="trailing-nul"),
        pytest.param(b'\x00{"name": "refund_order", "arguments": {}}', id="leading-nul"),
        pytest.param(b'{"name": "refund_order\x00", "arguments": {}}', id="raw-nul-in-string"),
        pytest.param(b'{"name": "refund_order", "arguments": "\x00"}', id="raw-nul-in-arguments"),
    ],
)
def test_raw_nul_bytes_are_400_and_the_audit_keeps_a_replacement_character(alice_agent, o12, body):
    # PostgreSQL text cannot hold U+0000: it must not turn a hostile call into a 500.
    record = assert_refused_and_only_audited(post_raw(alice_agent, body), code="malformed_request")
    assert record.raw_arguments == body.decode().replace("\x00", "\ufffd")


@pytest.mark.parametrize(
    "body, code",
    [
        pytest.param('{"name": "refund_order\\u0000", "arguments": {}}', "invalid_request", id="name"),
        pytest.param(
            '{"name": "refund_order", "arguments": {"order_id": "o-12\\u0000", "amount_minor": 5, '
            '"reason": "damaged"}}',
            "invalid_arguments",
            id="order-id",
        ),
        pytest.param(
            '{"name": "refund_order", "arguments": {"order_id": "o-12", "amount_minor": 5, '
            '"reason": "damaged\\u0000"}}',
            "invalid_arguments",
            id="reason-echoed-in-the-error",
        ),
        pytest.param(
            '{"name": "refund_order", "arguments": {"\\u0000": 1}}', "invalid_arguments", id="unknown-field-name"
        ),
        pytest.param('{"name": "refund_order", "arguments": "\\u0000"}', "invalid_arguments", id="arguments-string"),
        pytest.param('{"name": "refund_order", "arguments": {}, "\\u0000": 1}', "invalid_request", id="envelope-key"),
    ],
)
def test_escaped_nul_characters_are_400_and_never_a_server_error(alice_agent, o12, body, code):
    record = assert_refused_and_only_audited(post_raw(alice_agent, body), code=code)
    assert "\x00" not in record.raw_arguments
    assert "\x00" not in json.dumps(record.result)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            '{"name": "refund_order", "arguments": {"order_id": "\\ud800", "amount_minor": 5, "reason": "damaged"}}',
            id="lone-high-surrogate",
        ),
        pytest.param('{"name": "\\udfff", "arguments": {}}', id="lone-low-surrogate-in-name"),
        pytest.param('{"name": "refund_order", "arguments": {"\\ud800": 1}}', id="in-a-key"),
    ],
)
def test_lone_surrogates_are_400(alice_agent, o12, body):
    assert_refused_and_only_audited(post_raw(alice_agent, body), code="malformed_request")


def test_a_lone_surrogate_inside_an_arguments_string_is_400(alice_agent, o12):
    arguments = '{"order_id": "o-12\\udc00", "amount_minor": 5, "reason": "damaged"}'

    response = post_raw(alice_agent, json.dumps({"name": "refund_order", "arguments": arguments}))

    record = assert_refused_and_only_audited(response, code="invalid_arguments")
    assert record.raw_arguments == arguments


def test_a_paired_surrogate_escape_is_an_ordinary_character(alice_agent, o12):
    body = (
        '{"name": "refund_order", "arguments": {"order_id": "o-12\\ud83d\\ude00", "amount_minor": 5, '
        '"reason": "damaged"}}'
    )

    response = post_raw(alice_agent, body)

    assert_refused_and_only_audited(response, status=422, code="order_unavailable", event="proposal_refused")
    assert "o-12\U0001f600" in response.json()["error"]["message"]


# Duplicate keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param('{"name": "send_invoice", "name": "refund_order", "arguments": {}}', id="envelope-name"),
        pytest.param(
            '{"name": "refund_order", "arguments": {"order_id": "o-12", "amount_minor": 5, '
            '"amount_minor": 50000, "reason": "damaged"}}',
            id="arguments-object",
        ),
        pytest.param(
            '{"name": "refund_order", "arguments": {"order_id": "o-12", "amount_minor": 5, '
            '"amount\\u005fminor": 50000, "reason": "damaged"}}',
            id="arguments-object-escaped-twin",
        ),
        pytest.param(
            '{"name": "refund_order", "arguments": {"order_id": "o-12", "amount_minor": 5, '
            '"reason": "damaged"}, "arguments": {}}',
            id="envelope-arguments",
        ),
    ],
)
def test_duplicate_keys_in_the_body_are_400(alice_agent, o12, body):
    response = post_raw(alice_agent, body)

    record = assert_refused_and_only_audited(response, code="malformed_request")
    assert "Duplicate key" in response.json()["error"]["message"]
    assert record.raw_arguments == body


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"order_id": "o-12", "order_id": "o-17", "amount_minor": 5, "reason": "damaged"}', id="order-id"),
        pytest.param('{"order_id": "o-12", "amount_minor": 5, "reason": "damaged", "reason": "late"}', id="reason"),
        pytest.param(
            '{"order_id": "o-12", "amount_minor": 5, "reason": "damaged", "reas\\u006fn": "late"}', id="escaped-twin"
        ),
        pytest.param(
            '{"order_id": "o-12", "amount_minor": 5, "reason": "damaged", "x": {"a": 1, "a": 2}}', id="nested"
        ),
    ],
)
def test_duplicate_keys_in_the_arguments_string_are_400(alice_agent, o12, arguments):
    response = post_raw(alice_agent, json.dumps({"name": "refund_order", "arguments": arguments}))

    record = assert_refused_and_only_audited(response, code="invalid_arguments")
    assert "Duplicate key" in response.json()["error"]["message"]
    assert record.raw_arguments == arguments


def test_keys_that_differ_only_in_case_are_not_merged(alice_agent, o12):
    arguments = {**GOOD, "Amount_minor": 50000}

    response = post_raw(alice_agent, json.dumps({"name": "refund_order", "arguments": arguments}))

    record = assert_refused_and_only_audited(response, code="invalid_arguments")
    assert "Amount_minor" in record.result["error"]["fields"]


# Numbers ---------------------------------------------------------------------------------------

BIG_NUMBERS = [
    pytest.param(str(2**64), id="2**64"),
    pytest.param(str(2**63), id="2**63"),
    pytest.param(str(2**63 - 1), id="int64-max"),
    pytest.param(str(2**53), id="2**53"),
    pytest.param(str(10**400), id="10**400"),
    pytest.param(str(-(2**63) - 1), id="-2**63-1"),
    pytest.param(str(-(2**64)), id="-2**64"),
    pytest.param("9" * 4300, id="4300-digits"),
]


@pytest.mark.parametrize("number", BIG_NUMBERS)
def test_amounts_beyond_the_safe_range_are_400_in_the_body(alice_agent, o12, number):
    body = envelope_with(amount_arguments(number))

    response = post_raw(alice_agent, body)

    record = assert_refused_and_only_audited(response, code="invalid_arguments")
    assert list(response.json()["error"]["fields"]) == ["amount_minor"]
    assert json.loads(record.raw_arguments)["amount_minor"] == int(number)


@pytest.mark.parametrize("number", BIG_NUMBERS)
def test_amounts_beyond_the_safe_range_are_400_in_an_arguments_string(alice_agent, o12, number):
    arguments = amount_arguments(number)

    response = post_raw(alice_agent, json.dumps({"name": "refund_order", "arguments": arguments}))

    record = assert_refused_and_only_audited(response, code="invalid_arguments")
    assert record.raw_arguments == arguments


@pytest.mark.parametrize(
    "number",
    [
        pytest.param("9" * 5000, id="5000-digits"),
        pytest.param("-" + "1" * 4301, id="4301-digits-negative"),
        pytest.param("NaN", id="NaN"),
        pytest.param("Infinity", id="Infinity"),
        pytest.param("-Infinity", id="-Infinity"),
        pytest.param("1e400", id="overflows-to-infinity"),
        pytest.param("-1e999", id="overflows-to-minus-infinity"),
        pytest.param("1" + "0" * 400 + ".5", id="huge-float"),
    ],
)
def test_numbers_python_cannot_or_must_not_read_are_400_in_the_body(alice_agent, o12, number):
    body = envelope_with(amount_arguments(number))

    record = assert_refused_and_only_audited(post_raw(alice_agent, body), code="malformed_request")
    assert record.raw_arguments == body


@pytest.mark.parametrize("number", ["1e400", "-1e999", "1" + "0" * 400 + ".5"])
def test_a_float_that_overflows_is_400_in_an_arguments_string(alice_agent, o12, number):
    arguments = amount_arguments(number)

    response = post_raw(alice_agent, json.dumps({"name": "refund_order", "arguments": arguments}))

    assert_refused_and_only_audited(response, code="invalid_arguments")


def test_a_huge_number_in_the_call_id_is_400(alice_agent, o12):
    body = '{"name": "refund_order", "arguments": {}, "call_id": %s}' % ("7" * 4300)

    assert_refused_and_only_audited(post_raw(alice_agent, body), code="invalid_request")


# Bodies that are not a tool call -----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("", id="empty"),
        pytest.param("true", id="true"),
        pytest.param("[]", id="empty-list"),
        pytest.param("{}", id="empty-object"),
        pytest.param('""', id="empty-string"),
        pytest.param("-0", id="minus-zero"),
        pytest.param('[[{"name": "refund_order"}]]', id="nested-list"),
        pytest.param("[null]", id="list-of-null"),
        pytest.param(json.dumps(json.dumps({"name": "refund_order", "arguments": GOOD})), id="double-encoded-body"),
        pytest.param(" null ", id="null-with-whitespace"),
        pytest.param('{"name": null, "arguments": null}', id="nulls"),
        pytest.param('{"name": "", "arguments": {}}', id="blank-name"),
        pytest.param('{"name": "refund_order", "arguments": {}, "call_id": ""}', id="blank-call-id"),
    ],
)
def test_bodies_that_are_not_a_tool_call_are_400(alice_agent, o12, body):
    assert_refused_and_only_audited(post_raw(alice_agent, body), code="invalid_request")


@pytest.mark.parametrize("body", [" ", "\n\t", "{", "nul", "tru", "{'name': 'refund_order'}", "\x1b[31m"])
def test_bodies_that_are_not_json_are_400(alice_agent, o12, body):
    assert_refused_and_only_audited(post_raw(alice_agent, body), code="malformed_request")


# Content type ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type, body",
    [
        ("text/plain", json.dumps({"name": "refund_order", "arguments": GOOD})),
        ("application/x-www-form-urlencoded", "name=refund_order&order_id=o-12&amount_minor=500&reason=damaged"),
        (
            "multipart/form-data; boundary=xyz",
            '--xyz\r\nContent-Disposition: form-data; name="name"\r\n\r\nrefund_order\r\n--xyz--\r\n',
        ),
        ("application/xml", "<call><name>refund_order</name></call>"),
        ("application/json-patch+json", json.dumps({"name": "refund_order", "arguments": GOOD})),
        ("text/json", json.dumps({"name": "refund_order", "arguments": GOOD})),
        ("", json.dumps({"name": "refund_order", "arguments": GOOD})),
    ],
)
def test_a_body_that_is_not_declared_json_is_415_with_the_envelope(alice_agent, o12, content_type, body):
    response = post_raw(alice_agent, body, content_type=content_type)

    assert_refused_and_only_audited(response, status=415, code="unsupported_media_type")


def test_json_declared_in_another_charset_is_still_read_as_utf8(alice_agent, o12):
    body = json.dumps({"name": "refund_order", "arguments": GOOD}).encode("utf-16")

    response = post_raw(alice_agent, body, content_type="application/json; charset=utf-16")

    assert_refused_and_only_audited(response, code="malformed_request")


def test_a_json_content_type_with_parameters_is_accepted(alice_agent, o12):
    body = json.dumps({"name": "refund_order", "arguments": GOOD})

    response = post_raw(alice_agent, body, content_type="application/json; charset=utf-8")

    assert response.status_code == 201, response.content


def test_a_session_request_over_the_size_limit_is_a_json_400(alice, settings):
    browser = APIClient()
    browser.force_login(alice)
    body = json.dumps({"tools": ["refund_order"], "label": "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE})

    response = browser.generic("POST", "/api/agent/sessions", body, content_type="application/json")

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "malformed_request"
    assert AgentSession.objects.count() == 0


@pytest.mark.parametrize(
    "path",
    [
        "/api/agent/tools/",
        "/api/agent/tool-calls/",
        "/api/agent/previews/",
        "/api/agent/previews/a/b",
        "/api/agent/admin",
        "/api/agent/tools%00",
    ],
)
def test_an_unknown_agent_endpoint_is_a_json_404(alice_agent, o12, path):
    for response in (
        alice_agent.get(path),
        alice_agent.post(path, {"name": "refund_order", "arguments": GOOD}, format="json"),
    ):
        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"]["code"] == "not_found"
        assert response.json()["ok"] is False
    assert Preview.objects.count() == 0


# Unicode tricks in identifiers -------------------------------------------------------------------

LOOKALIKES = [
    pytest.param("o-\u200b12", id="zero-width-space"),
    pytest.param("o-1\u200d2", id="zero-width-joiner"),
    pytest.param("\u202eo-12", id="rtl-override"),
    pytest.param("o-12\u202c", id="pop-directional"),
    pytest.param("\u2066o-12\u2069", id="isolate"),
    pytest.param("o-12\u0000", id="nul"),
    pytest.param("o-12\ufeff", id="bom"),
    pytest.param("\u043e-12", id="cyrillic-o"),
    pytest.param("\uff4f-12", id="fullwidth-o"),
    pytest.param("o\u201012", id="unicode-hyphen"),
    pytest.param("o-1\u0332" + "2", id="combining-mark"),
    pytest.param("O-12", id="upper-case"),
    pytest.param(" o-12", id="leading-space"),
    pytest.param("o-12\n", id="trailing-newline"),
    pytest.param("o-12\r\nX-Injected: 1", id="crlf"),
    pytest.param("o-12' OR '1'='1", id="sql"),
    pytest.param("o-%", id="like-wildcard"),
    pytest.param("o-_2", id="like-underscore"),
    pytest.param("../o-12", id="path"),
]


def assert_no_preview_for_a_lookalike(response):
    assert response.status_code in (400, 422), response.content
    body = response.json()
    assert body["ok"] is False
    assert body["executed"] is False
    assert Preview.objects.count() == 0
    assert IdempotencyRecord.objects.count() == (1 if response.status_code == 422 else 0)
    record = proposal_records().get()
    assert record.event == ("proposal_invalid" if response.status_code == 400 else "proposal_refused")
    if response.status_code == 422:
        assert body["error"]["code"] == "order_unavailable"


@pytest.mark.parametrize("order_id", LOOKALIKES)
def test_lookalike_order_ids_are_refused_as_objects(alice_agent, o12, order_id):
    response = alice_agent.post(
        TOOL_CALLS,
        {"name": "refund_order", "arguments": {**GOOD, "order_id": order_id}},
        format="json",
        headers=KEY,
    )

    assert_no_preview_for_a_lookalike(response)


@pytest.mark.parametrize("order_id", LOOKALIKES)
def test_lookalike_order_ids_are_refused_in_strings(alice_agent, o12, order_id):
    arguments = json.dumps({**GOOD, "order_id": order_id})
    response = alice_agent.post(
        TOOL_CALLS, {"name": "refund_order", "arguments": arguments}, format="json", headers=KEY
    )

    assert_no_preview_for_a_lookalike(response)
    assert proposal_records().get().raw_arguments == arguments


@pytest.mark.parametrize("order_id", ["o-%", "o-_2", "%"])
def test_wildcards_do_not_reach_another_order(alice_agent, alice, order_id):
    OrderFactory(number="o-12", customer=alice)
    OrderFactory(number="o-22", customer=alice)

    response = propose(alice_agent, **{**GOOD, "order_id": order_id})

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "order_unavailable"


@pytest.mark.parametrize(
    "recipient",
    [
        "billing@example.test\r\nBcc: thief@example.test",
        "billing@example.test, thief@example.test",
        "Billing <billing@example.test>",
        "billing@example.test\u202e",
        "billing@exam\u0440le.test",  # Cyrillic р
    ],
)
def test_hostile_invoice_recipients_are_refused(alice, recipient):
    invoice = Invoice.objects.create(
        number="INV-17", customer=alice, currency="EUR", status=InvoiceStatus.ISSUED, total_minor=12000
    )
    InvoiceLine.objects.create(invoice=invoice, position=1, description="Consulting", quantity=1, unit_minor=12000)
    InvoiceContact.objects.create(invoice=invoice, email="billing@example.test")
    client = agent_client_for(alice, tools=("send_invoice",))

    response = propose(client, name="send_invoice", invoice_id="INV-17", recipient=recipient)

    if response.status_code == 201:  # a valid (if foreign-looking) address: only a staff approval sends it
        assert response.json()["preview"]["required_approvals"] == ["staff"]
        assert response.json()["executed"] is False
        assert response.json()["preview"]["recipient"] == recipient
        return
    assert response.status_code == 422, response.content
    assert response.json()["error"]["code"] == "recipient_invalid"
    assert Preview.objects.count() == 0


# Throttling ------------------------------------------------------------------------------------


@pytest.fixture(params=["locmem", "redis"])
def throttle_clock(request, monkeypatch, settings):
    """The throttle's clock, moved by hand; and no counter left over in the shared cache.

    Each test runs against the in-memory cache (DRF's own sliding window) and against Redis (the
    one-command sliding window that production uses), which must give the same answers."""
    if request.param == "redis":
        if not settings.REDIS_URL:
            pytest.skip("needs REDIS_URL")
        settings.CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": settings.REDIS_URL,
                "KEY_PREFIX": f"test-{uuid.uuid4().hex}",
            }
        }
    clock = {"now": 1_000_000.0}
    monkeypatch.setattr(AgentSessionThrottle, "timer", lambda self: clock["now"])
    keys = []

    def forget(*sessions):
        for session in sessions:
            for key in (f"throttle_agent_{session.pk}", f"throttle_agent_user_{session.user_id}"):
                keys.append(key)
                cache.delete(key)  # only these counters: never cache.clear() on a cache that may be shared

    clock["forget"] = forget
    yield clock
    for key in keys:
        cache.delete(key)


def test_the_fourth_call_in_a_minute_is_429_with_retry_after(alice, o12, settings, throttle_clock):
    settings.AGENT_THROTTLE_RATE = "3/min"
    client = agent_client_for(alice)
    throttle_clock["forget"](client.agent_session)

    assert client.get("/api/agent/tools").status_code == 200
    throttle_clock["now"] += 10
    assert propose(client, **GOOD).status_code == 201
    throttle_clock["now"] += 10
    assert client.get("/api/agent/tools").status_code == 200
    throttle_clock["now"] += 10
    before = proposal_records().count()

    response = propose(client, **{**GOOD, "amount_minor": 7})

    assert response.status_code == 429
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == "30"  # the first of the three calls leaves the window in 30 s
    body = response.json()
    assert body["ok"] is False
    assert body["executed"] is False
    assert body["error"]["code"] == "throttled"
    assert body["error"]["retry_after_seconds"] == 30
    assert Preview.objects.count() == 1
    # A throttled call is not even parsed; it leaves a bounded trace: a count per session and minute,
    # and (for the first few calls of the minute) one audit record with the start of the body.
    assert proposal_records().exclude(event="call_throttled").count() == before
    (record,) = proposal_records().filter(event="call_throttled")
    assert record.result["error"]["code"] == "throttled"
    assert '"amount_minor": 7' in record.raw_arguments or '"amount_minor":7' in record.raw_arguments
    tally = RejectedCallTally.objects.get(agent_session=client.agent_session)
    assert (tally.kind, tally.count) == ("throttled", 1)

    throttle_clock["now"] += 29
    assert client.get("/api/agent/tools").status_code == 429
    throttle_clock["now"] += 1
    assert client.get("/api/agent/tools").status_code == 200


def test_another_session_is_not_throttled(alice, bob, o12, settings, throttle_clock):
    settings.AGENT_THROTTLE_RATE = "3/min"
    busy = agent_client_for(alice)
    same_person = agent_client_for(alice)
    someone_else = agent_client_for(bob)
    throttle_clock["forget"](busy.agent_session, same_person.agent_session, someone_else.agent_session)

    answers = [busy.get("/api/agent/tools").status_code for _ in range(5)]

    assert answers == [200, 200, 200, 429, 429]
    assert same_person.get("/api/agent/tools").status_code == 200
    assert propose(same_person, **GOOD).status_code == 201
    assert someone_else.get("/api/agent/tools").status_code == 200


def test_every_endpoint_of_the_session_counts(alice, o12, settings, throttle_clock):
    settings.AGENT_THROTTLE_RATE = "3/min"
    client = agent_client_for(alice)
    throttle_clock["forget"](client.agent_session)

    preview_id = propose(client, **GOOD).json()["preview"]["id"]
    assert client.get(f"/api/agent/previews/{preview_id}").status_code == 200
    assert client.get("/api/agent/tools").status_code == 200

    for response in (
        client.get(f"/api/agent/previews/{preview_id}"),
        client.get("/api/agent/tools"),
        propose(client, **GOOD),
        post_raw(client, "not json"),
    ):
        assert response.status_code == 429
        assert int(response["Retry-After"]) >= 1


def test_a_rate_lowered_at_run_time_still_answers_with_retry_after(alice, o12, settings, throttle_clock):
    client = agent_client_for(alice)
    throttle_clock["forget"](client.agent_session)
    for _ in range(5):
        assert client.get("/api/agent/tools").status_code == 200
        throttle_clock["now"] += 1

    settings.AGENT_THROTTLE_RATE = "3/min"
    response = client.get("/api/agent/tools")

    assert response.status_code == 429
    # Five calls at t=0..4 and three allowed: the third newest (t=2) leaves the window at t=62.
    assert response["Retry-After"] == "57"
    assert response.json()["error"]["retry_after_seconds"] == 57


def test_a_call_the_persons_limit_refuses_does_not_count_against_the_session(alice, o12, settings, throttle_clock):
    """Both limits are checked before either counts the call: on Redis in one command."""
    settings.AGENT_THROTTLE_RATE = "2/min"
    settings.AGENT_USER_THROTTLE_RATE = "3/min"
    first, second = agent_client_for(alice), agent_client_for(alice)
    throttle_clock["forget"](first.agent_session, second.agent_session)

    answers = []
    for client in (first, first, second, second):  # at t = 0, 1, 2, 3
        answers.append(client.get("/api/agent/tools"))
        throttle_clock["now"] += 1
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    refused = answers[3]
    assert refused.json()["error"]["code"] == "throttled"
    assert refused["Retry-After"] == "57"  # the person's oldest call (t = 0) leaves their window at t = 60

    # At t = 60.5 the person's window holds t = 1 and 2. The second session made one call (t = 2): had the
    # refused one counted, it would be at its limit of two.
    throttle_clock["now"] = 1_000_060.5
    assert propose(second, **GOOD).status_code == 201
    assert second.get("/api/agent/tools").status_code == 429  # the person's three: t = 1, 2, 60.5
    assert Preview.objects.count() == 1


def test_retry_after_is_the_longer_wait_when_both_limits_refuse(alice, o12, settings, throttle_clock):
    settings.AGENT_THROTTLE_RATE = "2/min"
    settings.AGENT_USER_THROTTLE_RATE = "2/hour"
    client = agent_client_for(alice)
    throttle_clock["forget"](client.agent_session)
    assert client.get("/api/agent/tools").status_code == 200
    throttle_clock["now"] += 10
    assert client.get("/api/agent/tools").status_code == 200
    throttle_clock["now"] += 10

    response = client.get("/api/agent/tools")

    assert response.status_code == 429
    # The session may call again at t = 60, the person at t = 3600: the person's wait is the answer.
    assert response["Retry-After"] == "3580"
    assert response.json()["error"]["retry_after_seconds"] == 3580


# Tokens ----------------------------------------------------------------------------------------


def assert_401(response):
    assert response.status_code == 401, response.content
    assert response["WWW-Authenticate"] == (
        'Bearer realm="agent", resource_metadata="http://testserver/.well-known/oauth-protected-resource"'
    )
    body = response.json()
    assert body["ok"] is False
    assert body["executed"] is False
    assert body["error"]["code"] in {"not_authenticated", "authentication_failed"}


def anonymous_calls(client, preview_id, **extra):
    return [
        client.get("/api/agent/tools", **extra),
        client.post(TOOL_CALLS, {"name": "refund_order", "arguments": GOOD}, format="json", **extra),
        client.get(f"/api/agent/previews/{preview_id}", **extra),
    ]


@pytest.mark.parametrize("parameter", ["token", "access_token", "bearer", "api_key", "Authorization"])
def test_a_token_in_the_query_string_is_not_accepted(alice, o12, parameter):
    agent = agent_client_for(alice)
    preview_id = propose(agent, **GOOD).json()["preview"]["id"]
    stranger = APIClient()
    value = agent.token if parameter != "Authorization" else f"Bearer {agent.token}"

    for response in [
        stranger.get(f"/api/agent/tools?{parameter}={value}"),
        stranger.post(f"{TOOL_CALLS}?{parameter}={value}", {"name": "refund_order", "arguments": GOOD}, format="json"),
        stranger.get(f"/api/agent/previews/{preview_id}?{parameter}={value}"),
    ]:
        assert_401(response)
    assert Preview.objects.count() == 1


@pytest.mark.parametrize("cookie", ["token", "agent_token", "Authorization", "sessionid", "access_token"])
def test_a_token_in_a_cookie_is_not_accepted(alice, o12, cookie):
    agent = agent_client_for(alice)
    preview_id = propose(agent, **GOOD).json()["preview"]["id"]
    stranger = APIClient()
    stranger.cookies[cookie] = agent.token

    for response in anonymous_calls(stranger, preview_id):
        assert_401(response)
    assert Preview.objects.count() == 1


@pytest.mark.parametrize(
    "header",
    [
        pytest.param({"HTTP_X_API_KEY": "{token}"}, id="x-api-key"),
        pytest.param({"HTTP_X_AUTHORIZATION": "Bearer {token}"}, id="x-authorization"),
        pytest.param({"HTTP_AUTHORIZATION": "Token {token}"}, id="token-keyword"),
        pytest.param({"HTTP_AUTHORIZATION": "Basic {token}"}, id="basic-keyword"),
        pytest.param({"HTTP_AUTHORIZATION": "{token}"}, id="no-keyword"),
        pytest.param({"HTTP_AUTHORIZATION": "Bearer {token}x"}, id="one-character-more"),
        pytest.param({"HTTP_AUTHORIZATION": "Bearer {prefix}"}, id="prefix-only"),
        pytest.param({"HTTP_AUTHORIZATION": "Bearer agt_\u00e9t\u00e9"}, id="not-ascii"),
        pytest.param({"HTTP_AUTHORIZATION": "Bearer " + "a" * 20_000}, id="very-long"),
        pytest.param({"HTTP_AUTHORIZATION": "Bearer"}, id="keyword-only"),
    ],
)
def test_a_token_anywhere_but_the_bearer_header_is_not_accepted(alice, o12, header):
    agent = agent_client_for(alice)
    preview_id = propose(agent, **GOOD).json()["preview"]["id"]
    stranger = APIClient()
    extra = {k: v.format(token=agent.token, prefix=agent.agent_session.token_prefix) for k, v in header.items()}

    for response in anonymous_calls(stranger, preview_id, **extra):
        assert_401(response)
    assert Preview.objects.count() == 1


def test_a_token_in_the_body_is_not_accepted(alice, o12):
    agent = agent_client_for(alice)
    stranger = APIClient()

    response = stranger.post(
        TOOL_CALLS, {"name": "refund_order", "arguments": GOOD, "token": agent.token}, format="json"
    )

    assert_401(response)
    assert proposal_records().count() == 0


@pytest.mark.parametrize("spoil", ["expired", "expires-now", "revoked", "revoked-and-expired"])
def test_an_expired_or_revoked_session_gets_401_and_learns_nothing(alice, o12, spoil):
    agent = agent_client_for(alice)
    preview_id = propose(agent, **GOOD).json()["preview"]["id"]
    now = timezone.now()
    changes = {
        "expired": {"expires_at": now - timedelta(seconds=1)},
        "expires-now": {"expires_at": now},
        "revoked": {"revoked_at": now},
        "revoked-and-expired": {"revoked_at": now, "expires_at": now - timedelta(days=1)},
    }[spoil]
    AgentSession.objects.filter(pk=agent.agent_session.pk).update(**changes)
    records = proposal_records().count()

    for response in anonymous_calls(agent, preview_id):
        assert_401(response)
        assert "o-12" not in response.content.decode()
        assert preview_id not in response.content.decode()
    assert Preview.objects.count() == 1
    assert proposal_records().count() == records


def test_the_token_is_stored_only_as_a_hash(alice, o12):
    agent = agent_client_for(alice)
    propose(agent, **GOOD)
    post_raw(agent, "not json")

    session = AgentSession.objects.get()
    stored = [str(value) for value in AgentSession.objects.values().get().values()]
    assert agent.token not in " ".join(stored)
    assert agent.token[12:] not in " ".join(stored)
    assert session.token_hash != agent.token
    for record in AuditRecord.objects.all():
        assert agent.token not in json.dumps([record.raw_arguments, record.result, record.approval_basis])


# No leaks --------------------------------------------------------------------------------------


@pytest.fixture
def bobs_preview(bob, o17):
    response = propose(agent_client_for(bob), order_id="o-17", amount_minor=500, reason="damaged")
    assert response.status_code == 201
    return Preview.objects.get(pk=response.json()["preview"]["id"])


def page_of(response) -> bytes:
    """The page without its CSRF token, which Django masks anew for every response (the 404 page's
    logout form carries one)."""
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]+"', b'name="csrfmiddlewaretoken"', response.content)


def browser_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_another_customers_preview_page_is_404_like_a_random_id(alice, o12, bobs_preview):
    browser = browser_of(alice)

    foreign = browser.get(f"/previews/{bobs_preview.pk}/")
    missing = browser.get(f"/previews/{uuid.uuid4()}/")

    assert foreign.status_code == missing.status_code == 404
    assert page_of(foreign) == page_of(missing)
    assert foreign["Content-Type"] == missing["Content-Type"]
    assert b"o-17" not in foreign.content
    assert str(bobs_preview.pk).encode() not in foreign.content
    assert browser_of(bobs_preview.actor).get(f"/previews/{bobs_preview.pk}/").status_code == 200


@pytest.mark.parametrize("decision", ["confirm", "decline"])
def test_another_customers_preview_cannot_be_decided_and_answers_like_a_random_id(alice, o12, bobs_preview, decision):
    browser = browser_of(alice)

    foreign = browser.post(f"/previews/{bobs_preview.pk}/{decision}", {"digest": bobs_preview.digest})
    missing = browser.post(f"/previews/{uuid.uuid4()}/{decision}", {"digest": bobs_preview.digest})
    incomplete = browser.post(f"/previews/{bobs_preview.pk}/{decision}", {})

    assert foreign.status_code == missing.status_code == incomplete.status_code == 404
    assert page_of(foreign) == page_of(missing) == page_of(incomplete)
    bobs_preview.refresh_from_db()
    assert bobs_preview.status == PreviewStatus.AWAITING_CUSTOMER
    assert Approval.objects.count() == 0


def test_another_customers_preview_is_404_like_a_random_id_for_their_agent(alice, o12, bobs_preview):
    agent = agent_client_for(alice)

    foreign = agent.get(f"/api/agent/previews/{bobs_preview.pk}")
    missing = agent.get(f"/api/agent/previews/{uuid.uuid4()}")
    not_an_id = agent.get("/api/agent/previews/../../orders/")

    assert foreign.status_code == missing.status_code == 404
    assert page_of(foreign) == page_of(missing)
    assert not_an_id.status_code == 404


def test_another_customers_order_is_refused_like_a_missing_one(alice, o12, bobs_preview):
    agent = agent_client_for(alice)

    foreign = propose(agent, order_id="o-17", amount_minor=500, reason="damaged")
    missing = propose(agent, order_id="o-99", amount_minor=500, reason="damaged")

    assert foreign.status_code == missing.status_code == 422
    assert foreign.json()["error"]["code"] == missing.json()["error"]["code"] == "order_unavailable"
    assert foreign.json()["error"]["message"].replace("o-17", "o-99") == missing.json()["error"]["message"]
    assert set(foreign.json()["error"]) == set(missing.json()["error"])


def test_the_order_list_never_shows_other_customers_orders(db):
    customers = [UserFactory(username=name) for name in ("carol", "dave", "erin")]
    numbers = {}
    for customer in customers:
        numbers[customer] = [
            OrderFactory(number=f"ORD-{customer.username}-{i}", customer=customer, total_minor=1000 + i).number
            for i in range(3)
        ]
        propose(agent_client_for(customer), order_id=numbers[customer][0], amount_minor=100, reason="damaged")

    for customer in customers:
        page = browser_of(customer).get("/orders/").content.decode()
        for other, theirs in numbers.items():
            for number in theirs:
                assert (number in page) is (other == customer), (customer, number)
        # their own pending refund, nobody else's (besides the menu's "My requests", /previews/)
        assert len(re.findall(r"/previews/[0-9a-f-]{36}/", page)) == 1


def test_the_order_list_asks_a_stranger_to_log_in(db, o12):
    response = Client().get("/orders/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
