"""Agent session webhooks: each preview transition is a Standard Webhooks message to the session's URL,
recorded with its attempts; a dead endpoint never holds up an execution."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO

import pytest
from approval_gateway_client import WebhookVerificationError, verify_webhook
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from approvals.agents import webhooks
from approvals.core.services import agent_session_create, preview_approve
from approvals.models import AgentSession, ApprovalRole, Preview, WebhookDelivery, WebhookDeliveryStatus
from refunds.models import Refund
from tests.conftest import propose
from tests.factories import OrderFactory, UserFactory


class Receiver:
    """An HTTP endpoint on 127.0.0.1 that records what it is sent and answers `status` after `delay`."""

    def __init__(self, status=204, delay=0.0):
        self.messages, self.status, self.delay = [], status, delay
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server interface
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.messages.append((dict(self.headers), body))
                time.sleep(receiver.delay)
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/agent"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    endpoint = Receiver()
    yield endpoint
    endpoint.close()


@pytest.fixture
def published(monkeypatch):
    """Deliveries handed to a worker, run by the test itself (one attempt each, in order)."""
    ids = []
    monkeypatch.setattr(webhooks, "_publish", lambda delivery_id, countdown=0: ids.append((delivery_id, countdown)))
    return ids


def mint_with_webhook(username, url):
    out = StringIO()
    call_command("create_agent_session", "--user", username, "--tools", "refund_order", "--webhook", url, stdout=out)
    lines = out.getvalue().strip().splitlines()
    return lines


def test_create_agent_session_prints_the_secret_before_the_token(alice, receiver):
    lines = mint_with_webhook("alice", receiver.url)
    assert lines[-1].startswith("agt_")
    assert lines[-2].startswith("webhook-secret: whsec_")
    session = AgentSession.objects.get()
    assert session.webhook_url == receiver.url
    assert lines[-2] == f"webhook-secret: {session.webhook_secret}"


@pytest.mark.parametrize("url", ["ftp://example.test/x", "javascript:alert(1)", "/relative", "http://u:p@host/x"])
def test_only_http_urls_are_taken(alice, url):
    with pytest.raises(Exception, match="webhook URL"):
        mint_with_webhook("alice", url)
    assert AgentSession.objects.count() == 0


def test_private_addresses_are_refused_unless_allowed(alice, settings):
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(Exception, match="private or loopback"):
        mint_with_webhook("alice", "http://127.0.0.1:9/hook")
    assert AgentSession.objects.count() == 0


def test_each_transition_is_a_signed_message_carrying_the_preview_envelope(
    alice, receiver, published, settings, django_capture_on_commit_callbacks
):
    settings.PUBLIC_BASE_URL = "http://testserver/"
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    *_, secret_line, token = mint_with_webhook("alice", receiver.url)
    secret = secret_line.removeprefix("webhook-secret: ")
    agent = Client(headers={"Authorization": f"Bearer {token}"})
    with django_capture_on_commit_callbacks(execute=True):
        response = agent.post(
            "/api/agent/tool-calls",
            {"name": "refund_order", "arguments": {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}},
            content_type="application/json",
        )
    preview = Preview.objects.get()
    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    deliveries = list(WebhookDelivery.objects.order_by("pk"))
    assert [d.event_type for d in deliveries] == ["preview.awaiting_customer", "preview.approved", "preview.executed"]
    assert [delivery_id for delivery_id, _ in published] == [d.pk for d in deliveries]
    for delivery in deliveries:
        assert webhooks.webhook_attempt(delivery.pk) is None
    assert len(receiver.messages) == 3
    for (headers, body), delivery in zip(receiver.messages, deliveries, strict=True):
        event = Webhook(secret).verify(body, headers)  # the standardwebhooks package's own check
        assert event == verify_webhook(secret, body, headers)  # the repository's client agrees
        assert headers["webhook-id"] == delivery.message_id
        assert event["type"] == delivery.event_type
    first = json.loads(receiver.messages[0][1])
    assert first == {"type": "preview.awaiting_customer", **response.json()}
    last = json.loads(receiver.messages[-1][1])
    assert last == {"type": "preview.executed", **agent.get(f"/api/agent/previews/{preview.pk}").json()}
    assert last["outcome"] == "succeeded" and last["executed"] is True
    for delivery in WebhookDelivery.objects.all():
        assert (delivery.status, delivery.attempts, delivery.last_status_code, delivery.last_error) == (
            WebhookDeliveryStatus.DELIVERED,
            1,
            204,
            "",
        )
        assert delivery.delivered_at is not None


def test_a_forged_or_stale_message_is_refused_by_the_client():
    secret = webhooks.webhook_secret_new()
    body = json.dumps({"type": "preview.executed"})
    headers = webhooks.sign(secret, "msg_1", timezone.now(), body)
    assert verify_webhook(secret, body, headers) == {"type": "preview.executed"}
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, body.replace("executed", "declined"), headers)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(webhooks.webhook_secret_new(), body, headers)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, body, headers, now=time.time() + 3600)


def test_failures_are_retried_with_back_off_recorded_and_given_up(
    alice, published, settings, django_capture_on_commit_callbacks
):
    settings.AGENT_WEBHOOK_MAX_ATTEMPTS = 3
    failing = Receiver(status=500)
    try:
        session, token = agent_session_create(user=alice, tools=["refund_order"])
        webhooks.agent_session_webhook_set(session, failing.url)
        OrderFactory(number="o-12", customer=alice)
        agent = Client(headers={"Authorization": f"Bearer {token}"})
        with django_capture_on_commit_callbacks(execute=True):
            assert (
                agent.post(
                    "/api/agent/tool-calls",
                    {
                        "name": "refund_order",
                        "arguments": {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"},
                    },
                    content_type="application/json",
                ).status_code
                == 201
            )
        delivery = WebhookDelivery.objects.get()
        waits = [webhooks.webhook_attempt(delivery.pk) for _ in range(3)]
    finally:
        failing.close()
    assert waits[0] is not None and waits[1] is not None and waits[2] is None
    assert 0 < waits[0] and 0 < waits[1]
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status_code, delivery.last_error) == (
        WebhookDeliveryStatus.FAILED,
        3,
        500,
        "HTTP 500",
    )
    assert len(failing.messages) == 3
    # Each attempt is the same message: receivers deduplicate on webhook-id.
    assert len({headers["webhook-id"] for headers, _ in failing.messages}) == 1
    assert webhooks.webhook_attempt(delivery.pk) is None  # given up: no more attempts


def test_sessions_without_a_webhook_send_nothing(alice_agent, o12, published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged").status_code == 201
    assert WebhookDelivery.objects.count() == 0 and published == []


def test_the_console_lists_deliveries_and_failures(alice, published, client):
    from django.contrib.auth.models import Group

    session, _token = agent_session_create(user=alice, tools=["refund_order"])
    webhooks.agent_session_webhook_set(session, "http://127.0.0.1:9/dead")
    WebhookDelivery.objects.create(
        agent_session=session,
        message_id="msg_dead1",
        event_type="preview.executed",
        url=session.webhook_url,
        payload={},
        status=WebhookDeliveryStatus.FAILED,
        attempts=8,
        last_error="ConnectError: [Errno 111] Connection refused",
    )
    sam = UserFactory(username="sam", is_staff=True)
    sam.groups.add(Group.objects.get(name="Refund reviewers"))
    client.force_login(sam)
    page = client.get("/console/agent-sessions/").content.decode()
    assert "http://127.0.0.1:9/dead" in page
    assert "preview.executed" in page and "Failed (gave up)" in page and "Connection refused" in page


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_dead_endpoint_never_delays_a_refund(settings):
    """The real path: Celery eager, so the attempt runs on a thread of its own; the endpoint takes 3 s."""
    settings.AGENT_WEBHOOK_DEADLINE_SECONDS = 10
    settings.AGENT_WEBHOOK_MAX_ATTEMPTS = 1
    slow = Receiver(delay=3.0)
    try:
        alice = UserFactory(username="alice")
        OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
        session, token = agent_session_create(user=alice, tools=["refund_order"])
        webhooks.agent_session_webhook_set(session, slow.url)
        agent = Client(headers={"Authorization": f"Bearer {token}"})
        started = time.monotonic()
        response = agent.post(
            "/api/agent/tool-calls",
            {"name": "refund_order", "arguments": {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}},
            content_type="application/json",
        )
        preview = Preview.objects.get()
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
        elapsed = time.monotonic() - started
        assert response.status_code == 201
        assert Refund.objects.count() == 1 and Preview.objects.get().status == "executed"
        assert elapsed < 2.0, f"proposing and executing took {elapsed:.1f}s behind a 3 s webhook endpoint"
        deadline = time.monotonic() + 15
        while WebhookDelivery.objects.filter(status=WebhookDeliveryStatus.PENDING).exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert sorted(WebhookDelivery.objects.values_list("event_type", "status")) == [
            ("preview.approved", "delivered"),
            ("preview.awaiting_customer", "delivered"),
            ("preview.executed", "delivered"),
        ]
    finally:
        slow.close()
