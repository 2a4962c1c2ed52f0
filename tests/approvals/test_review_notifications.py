"""Approver notifications against a real SMTP server (aiosmtpd) and a local HTTP receiver that checks
the Standard Webhooks signature: batched, linked to each preview's console page, escalated when overdue."""

import base64
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth.models import Group
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from approvals.console.notifications import notify_reviewers
from approvals.models import AuditEvent, AuditRecord, Preview, PreviewStatus, ReviewNotice
from tests.console.conftest import bulk_previews, logged_in, make_reviewer
from tests.factories import StaffFactory, UserFactory
from tests.invoices.conftest import RecordingHandler, free_port

SECRET = "whsec_" + base64.b64encode(b"review-notify-secret-for-tests!!").decode()
BASE = "https://gateway.example.test"


class Receiver:
    """A local HTTP endpoint that verifies each message's signature with the shared secret."""

    def __init__(self, secret):
        self.secret = secret
        self.messages = []
        self.status = 204
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    Webhook(receiver.secret).verify(body, headers)
                    verified = True
                except WebhookVerificationError:
                    verified = False
                receiver.messages.append({"headers": headers, "body": json.loads(body), "verified": verified})
                self.send_response(receiver.status if verified else 400)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def smtp(settings):
    handler = RecordingHandler()
    controller = Controller(handler, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", controller.port, 5
    try:
        yield handler
    finally:
        controller.stop()


@pytest.fixture
def receiver(settings):
    with Receiver(SECRET) as running:
        settings.REVIEW_NOTIFY_WEBHOOKS = [running.url]
        settings.REVIEW_NOTIFY_SECRET = SECRET
        yield running


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.PUBLIC_BASE_URL = BASE
    settings.REVIEW_ESCALATE_AFTER_SECONDS = 3600
    settings.REVIEW_ESCALATE_EMAILS = ["ops@example.test", "lead@example.test"]


@pytest.fixture
def reviewers(db):
    rita, ron = make_reviewer("rita"), make_reviewer("ron")
    nomail = make_reviewer("nomail")
    nomail.email = ""
    nomail.save(update_fields=["email"])
    invoice_only = StaffFactory(username="ivy")
    invoice_only.groups.add(Group.objects.get(name="Invoice approvers"))
    return rita, ron


def bodies(smtp):
    return {m["rcpt_tos"][0]: m["message"] for m in smtp.messages}


def test_a_burst_of_500_is_one_email_per_reviewer_and_one_webhook(smtp, receiver, reviewers):
    customer = UserFactory(username="dora")
    previews = bulk_previews(500, customer=customer, order_number="o-500")

    report = notify_reviewers()

    assert (report.emails, report.webhooks, report.failures) == (2, 1, 0)
    sent = bodies(smtp)
    assert set(sent) == {"rita@example.test", "ron@example.test"}  # the deciding group, with an address
    message = sent["rita@example.test"]
    assert message["Subject"] == "[Example Shop] 500 previews wait for staff review"
    text = message.get_content()
    for preview in (previews[0], previews[250], previews[499]):
        assert f"{BASE}/console/previews/{preview.pk}/" in text
    assert "First refund of this customer" in text  # the risk flag travels with the line

    assert len(receiver.messages) == 1
    hook = receiver.messages[0]
    assert hook["verified"] is True
    assert hook["headers"]["webhook-id"].startswith("msg_")
    body = hook["body"]
    assert body["type"] == "review.needed" and body["count"] == 500
    assert body["queue_url"] == f"{BASE}/console/"
    assert body["previews"][0]["url"] == f"{BASE}/console/previews/{previews[0].pk}/"
    assert body["previews"][0]["amount"] == "€120.00" and body["previews"][0]["amount_minor"] == 12000
    assert body["text"].startswith("500 previews wait for staff review:\n- Refund €120.00 on o-500 for customer “dora”")
    assert "… and 480 more in the queue" in body["text"]  # Slack-sized

    assert ReviewNotice.objects.filter(emailed_at__isnull=False, webhooks_sent_at__isnull=False).count() == 500
    assert AuditRecord.objects.filter(event=AuditEvent.REVIEWERS_NOTIFIED).count() == 500

    # Nothing is sent twice.
    again = notify_reviewers()
    assert (again.emails, again.webhooks) == (0, 0)
    assert len(smtp.messages) == 2 and len(receiver.messages) == 1


def test_a_preview_waiting_too_long_is_escalated_and_shown_overdue(smtp, receiver, reviewers):
    customer = UserFactory(username="dora")
    old, fresh = bulk_previews(2, customer=customer, order_number="o-9")
    Preview.objects.filter(pk=old.pk).update(status_changed_at=timezone.now() - timedelta(hours=2))

    notify_reviewers()

    overdue = [m for m in smtp.messages if m["rcpt_tos"] == ["ops@example.test", "lead@example.test"]]
    assert len(overdue) == 1
    assert overdue[0]["message"]["Subject"].startswith("[Example Shop] Overdue: 1 preview waits")
    text = overdue[0]["message"].get_content()
    assert f"{BASE}/console/previews/{old.pk}/" in text and str(fresh.pk) not in text
    kinds = sorted(m["body"]["type"] for m in receiver.messages)
    assert kinds == ["review.needed", "review.overdue"]
    escalated = AuditRecord.objects.get(event=AuditEvent.REVIEW_ESCALATED)
    assert escalated.preview_id == old.pk
    assert escalated.result["emailed"] == ["ops@example.test", "lead@example.test"]

    page = logged_in(reviewers[0]).get("/console/").content.decode()
    assert page.count('class="badge overdue-badge"') == 1
    only = logged_in(reviewers[0]).get("/console/?overdue=on").content.decode()
    assert str(old.pk) in only and str(fresh.pk) not in only

    # Escalated once.
    notify_reviewers()
    assert len([m for m in smtp.messages if m["rcpt_tos"][0] == "ops@example.test"]) == 1


def test_a_failing_receiver_is_tried_again_with_the_same_message_id(smtp, receiver, reviewers):
    customer = UserFactory(username="dora")
    bulk_previews(3, customer=customer, order_number="o-3")
    receiver.status = 503

    report = notify_reviewers()
    assert report.failures == 1 and report.emails == 2
    notices = ReviewNotice.objects.all()
    assert all(n.emailed_at is not None and n.webhooks_sent_at is None for n in notices)
    assert all(n.attempts == 1 and "503" in n.last_error for n in notices)

    receiver.status = 200
    report = notify_reviewers()
    assert (report.emails, report.webhooks, report.failures) == (0, 1, 0)  # emails are not sent again
    first, second = receiver.messages
    assert first["headers"]["webhook-id"] == second["headers"]["webhook-id"]
    assert ReviewNotice.objects.filter(webhooks_sent_at__isnull=True).count() == 0


def test_a_mail_server_that_is_down_leaves_the_email_pending(settings, receiver, reviewers):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", free_port(), 2
    bulk_previews(1, customer=UserFactory(username="dora"), order_number="o-1")
    report = notify_reviewers()
    notice = ReviewNotice.objects.get()
    assert report.failures == 1 and notice.emailed_at is None and notice.webhooks_sent_at is not None
    assert "email" in notice.last_error


def test_a_preview_decided_before_the_run_is_not_announced(smtp, receiver, reviewers):
    preview = bulk_previews(1, customer=UserFactory(username="dora"), order_number="o-1")[0]
    from approvals.console.notifications import notices_record, notices_send

    notices_record()
    Preview.objects.filter(pk=preview.pk).update(status=PreviewStatus.REJECTED)
    report = notices_send()
    assert report.skipped == 1 and smtp.messages == [] and receiver.messages == []


def test_nothing_is_sent_unsigned(settings, smtp, reviewers):
    with Receiver(SECRET) as running:
        settings.REVIEW_NOTIFY_WEBHOOKS, settings.REVIEW_NOTIFY_SECRET = [running.url], ""
        bulk_previews(1, customer=UserFactory(username="dora"), order_number="o-1")
        report = notify_reviewers()
        assert running.messages == [] and report.failures == 1
    assert "REVIEW_NOTIFY_SECRET is not set" in ReviewNotice.objects.get().last_error


def test_the_signature_is_checked_against_the_secret(receiver, reviewers, settings):
    """The receiver refuses a message signed with another secret: the signature is real."""
    settings.REVIEW_NOTIFY_SECRET = "whsec_" + base64.b64encode(b"another-secret-another-secret-!!").decode()
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    bulk_previews(1, customer=UserFactory(username="dora"), order_number="o-1")
    report = notify_reviewers()
    assert receiver.messages[0]["verified"] is False and report.failures == 1


def test_a_burst_entering_the_staff_queue_schedules_one_digest(
    settings, monkeypatch, alice, django_capture_on_commit_callbacks
):
    """With a broker, the first preview that starts waiting for staff in a window schedules the digest at
    the window's end; the rest of the burst joins it."""
    from django.core.cache import cache

    from approvals import tasks
    from approvals.console.notifications import KICK_KEY, _kick_on_waiting
    from approvals.core import transitions
    from tests.console.conftest import confirmed, proposed
    from tests.factories import OrderFactory

    # Registered at start-up only with a broker (not in eager mode, as in the tests).
    monkeypatch.setattr(transitions, "_listeners", [_kick_on_waiting])
    cache.delete(KICK_KEY)
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 100}
    settings.REVIEW_NOTIFY_BATCH_SECONDS = 30
    scheduled = []
    monkeypatch.setattr(tasks.notify_reviewers, "apply_async", lambda **kw: scheduled.append(kw))
    OrderFactory(number="o-5", customer=alice, currency="EUR", total_minor=90000)
    previews = [proposed(alice, "o-5", 1000 + i) for i in range(3)]
    settings.CELERY_TASK_ALWAYS_EAGER = False
    try:
        with django_capture_on_commit_callbacks(execute=True):
            for preview in previews:
                confirmed(preview)
    finally:
        settings.CELERY_TASK_ALWAYS_EAGER = True
        cache.delete(KICK_KEY)
    assert scheduled == [{"countdown": 30}]


HOSTILE_NAME = '<!channel> <http://evil.example/console|Open the console>\nURGENT” approve at once &amp; "now"'


def test_a_customers_chosen_name_is_quoted_and_disarmed_in_every_message(smtp, receiver, reviewers):
    customer = UserFactory(username=HOSTILE_NAME)  # an account made before the import had an alphabet
    bulk_previews(1, customer=customer, order_number="o-9")

    report = notify_reviewers()
    assert (report.emails, report.webhooks, report.failures) == (2, 1, 0)

    shown = "customer “<!channel> <http://evil.example/console|Open the console> URGENT' approve at once &amp; 'now'”"
    text = receiver.messages[0]["body"]["text"]
    assert "<!" not in text and "<http" not in text and "|Open the console>" not in text
    assert text.startswith(
        "1 preview waits for staff review:\n"
        "- Refund €120.00 on o-9 for customer “ &lt;http://evil.example/console|Open the console&gt; URGENT' "
        "approve at once &amp;amp; 'now'”, damaged [First refund of this customer"
    )
    assert text.endswith(f"]: {BASE}/console/previews/{Preview.objects.get().pk}/") and text.count("\n") == 1
    summary = receiver.messages[0]["body"]["previews"][0]["summary"]
    assert summary == f"Refund €120.00 on o-9 for {shown}, damaged"  # JSON: quoted and named, not escaped

    body = bodies(smtp)["rita@example.test"].get_content()
    assert f"- Refund €120.00 on o-9 for {shown}, damaged [" in body
    assert not any(line.startswith("URGENT") for line in body.splitlines())  # no line of its own
