"""Structured logs: one JSON object per line, joined on the preview id from the agent's proposal through
the customer's confirmation to the worker's execution, and no secret in any of them."""

import io
import json
import logging
from types import SimpleNamespace

import pytest
from django.test import Client

from approvals.models import Preview, PreviewStatus
from approvals.operations import logs
from config.celery import bind_log_context, send_log_context, unbind_log_context
from tests.conftest import propose
from tests.factories import OrderFactory, UserFactory

PASSWORD = "pass-for-tests"  # tests.factories.UserFactory's


@pytest.fixture
def json_lines():
    """Everything logged during the test, through the production handler's filter and formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logs.JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)

    def read() -> list[dict]:
        text = stream.getvalue()
        return [json.loads(line) for line in text.splitlines()]

    read.text = lambda: stream.getvalue()
    yield read
    root.removeHandler(handler)
    root.setLevel(level)


def test_a_json_line_has_time_level_logger_message_and_the_context(json_lines):
    token = logs.bind(request_id="req-1", preview_id="p-1", agent_session=7, action="refund_order")
    try:
        logging.getLogger("approvals.test").warning("something %s", "happened", extra={"attempt": 2})
    finally:
        logs.reset(token)
    logging.getLogger("approvals.test").info("outside")
    inside, outside = json_lines()
    assert inside["time"].endswith("+00:00") and inside["time"][:4].isdigit()
    assert {k: inside[k] for k in ("level", "logger", "message", "attempt")} == {
        "level": "WARNING",
        "logger": "approvals.test",
        "message": "something happened",
        "attempt": 2,
    }
    assert (inside["request_id"], inside["preview_id"], inside["agent_session"], inside["action"]) == (
        "req-1",
        "p-1",
        "7",
        "refund_order",
    )
    assert outside["message"] == "outside" and "request_id" not in outside and "preview_id" not in outside


def test_the_text_format_is_readable_and_carries_the_context():
    record = logging.LogRecord("approvals.pipeline", logging.INFO, __file__, 1, "proposal created", None, None)
    record.request_id, record.preview_id = "req-9", "abc"
    line = logs.TextFormatter().format(record)
    assert line.endswith("INFO approvals.pipeline: proposal created [request_id=req-9 preview_id=abc]")


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        ("token agt_AbC123-xyz_0987654321 refused", "agt_[redacted]", "AbC123"),
        ("Authorization: Bearer s3cr3t.value", "Bearer [redacted]", "s3cr3t"),
        ("login password=hunter22 for alice", "password=[redacted]", "hunter22"),
        ('{"password": "hunter22"}', '"password": "[redacted]"', "hunter22"),
        ("postgres://gateway:dbpass@db:5432/gateway", "gateway:[redacted]@db", "dbpass"),
        ("card 4242 4242 4242 4242 declined", "[card …4242]", "4242 4242 4242"),
        ("card 4000-0566-5566-5556", "[card …5556]", "4000-0566"),
        ("iban DE89 3704 0044 0532 0130 00 refused", "[iban …3000]", "3704 0044"),
        ("stripe key sk_live_51Habcdefghijkl", "sk_live_[redacted]", "51Habc"),
        ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_[redacted]", "MfKQ9r"),
    ],
)
def test_secrets_are_scrubbed_from_text(text, kept, gone):
    scrubbed = logs.scrub(text)
    assert kept in scrubbed and gone not in scrubbed


def test_ids_and_amounts_are_left_alone():
    text = "preview 4f6c1a7e-1234-4321-8888-123412341234 of order o-12 for 24990 at 1733061234567"
    assert logs.scrub(text) == text


def test_secret_fields_are_dropped_whole_and_context_fields_kept():
    scrubbed = logs.scrub_value(
        {
            "password": "x",
            "email_body": "Dear…",
            "headers": {"Authorization": "k"},
            "agent_session": "12",
            "token_prefix": "agt_abc",
            "amount_minor": 500,
        }
    )
    assert scrubbed == {
        "password": "[redacted]",
        "email_body": "[redacted]",
        "headers": {"Authorization": "[redacted]"},
        "agent_session": "12",
        "token_prefix": "agt_[redacted]",
        "amount_minor": 500,
    }


def test_exceptions_are_scrubbed_in_the_json_line(json_lines):
    try:
        raise ValueError("bad token agt_ZZZ999secret")
    except ValueError:
        logging.getLogger("approvals.test").exception("failed with password=hunter22")
    (line,) = json_lines()
    assert "ZZZ999secret" not in json.dumps(line) and "hunter22" not in json.dumps(line)
    assert "agt_[redacted]" in line["exc_info"] and line["message"] == "failed with password=[redacted]"


def test_propose_confirm_execute_lines_join_on_the_preview_across_web_and_worker(
    json_lines, transactional_db, alice, o12, alice_agent
):
    created = propose(
        alice_agent, headers={"X-Request-ID": "req-propose"}, order_id="o-12", amount_minor=500, reason="damaged"
    )
    assert created.status_code == 201 and created["X-Request-ID"] == "req-propose"
    preview_id = created.json()["preview"]["id"]
    preview = Preview.objects.get(pk=preview_id)

    browser = Client()
    assert browser.post("/accounts/login/", {"username": "alice", "password": PASSWORD}).status_code == 302
    # Eager Celery: the worker's task runs in this process, in the request, once the confirmation commits.
    confirmed = browser.post(
        f"/previews/{preview_id}/confirm", {"digest": preview.digest}, HTTP_X_REQUEST_ID="req-confirm"
    )
    assert confirmed.status_code == 302 and confirmed["X-Request-ID"] == "req-confirm"
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED

    lines = [line for line in json_lines() if line.get("preview_id") == preview_id]
    by_message = {line["message"]: line for line in lines}
    assert {"proposal created", "preview confirmed", "execution succeeded"} <= set(by_message)
    session = str(alice_agent.agent_session.pk)
    for message, request_id in (
        ("proposal created", "req-propose"),
        ("preview confirmed", "req-confirm"),
        ("execution succeeded", "req-confirm"),
    ):
        line = by_message[message]
        assert (line["request_id"], line["agent_session"], line["action"]) == (request_id, session, "refund_order"), (
            line
        )
        assert line["logger"] == "approvals.pipeline"
    assert by_message["execution succeeded"]["confirm_to_executed_seconds"] >= 0
    # The whole output: no agent token, no password, not even in Django's own lines.
    text = json_lines.text()
    assert alice_agent.token not in text and alice_agent.token[4:] not in text
    assert PASSWORD not in text


def test_a_published_task_carries_the_context_and_the_worker_binds_it():
    token = logs.bind(request_id="req-confirm", preview_id="p-1", agent_session="7", action="refund_order")
    headers = {}
    try:
        send_log_context(headers=headers)
    finally:
        logs.reset(token)
    assert headers["log_context"] == {
        "request_id": "req-confirm",
        "preview_id": "p-1",
        "agent_session": "7",
        "action": "refund_order",
    }
    assert logs.current() == {}

    # In the worker the header is an attribute of the task's request.
    task = SimpleNamespace(
        name="approvals.execute_preview",
        request=SimpleNamespace(is_eager=False, id="task-1", log_context=headers["log_context"]),
    )
    bind_log_context(task=task, args=["p-1"], kwargs={})
    assert logs.current() == headers["log_context"]
    unbind_log_context(task=task)
    assert logs.current() == {}

    # Published without a context (the sweeper): the task's id joins its lines, and its preview is bound.
    task = SimpleNamespace(name="approvals.execute_preview", request=SimpleNamespace(is_eager=False, id="task-2"))
    bind_log_context(task=task, args=["p-2"], kwargs={})
    assert logs.current() == {"request_id": "task-2", "preview_id": "p-2"}
    unbind_log_context(task=task)


def test_djangos_own_line_about_a_refused_request_carries_its_request_id(json_lines, alice_agent):
    response = propose(
        alice_agent, headers={"X-Request-ID": "req-422"}, order_id="nope", amount_minor=1, reason="damaged"
    )
    assert response.status_code == 422
    (line,) = [line for line in json_lines() if line["logger"] == "django.request"]
    assert line["message"] == "Unprocessable Entity: /api/agent/tool-calls" and line["request_id"] == "req-422"


def test_an_unauthenticated_call_with_a_token_logs_no_token(json_lines, db):
    UserFactory(username="mallory")
    OrderFactory(number="o-1")
    stolen = "agt_" + "Q" * 43
    response = Client().get("/api/agent/tools", HTTP_AUTHORIZATION=f"Bearer {stolen}")
    assert response.status_code == 401
    logging.getLogger("approvals.test").warning("rejected %s", f"Authorization: Bearer {stolen}")
    assert stolen not in json_lines.text() and "QQQQQQQQ" not in json_lines.text()
