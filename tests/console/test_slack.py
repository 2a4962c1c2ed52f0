"""Reviewing in Slack against a local server that speaks Slack's Web API (tests/console/fake_slack.py):
the preview posted as the console summarises it, decisions from signed button clicks attributed to a
staff member and taken through the one decision path, refusals that decide nothing, and the message
replaced by every later change so that no stale button stays."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db.models import F
from django.utils import timezone

from approvals.console import slack as slack_module
from approvals.console.slack import PAUSE_KEY, reviews_sync
from approvals.console.slack_views import requests_refused
from approvals.core.services import preview_approve, previews_expire_stale
from approvals.models import (
    Approval,
    ApprovalRole,
    AuditEvent,
    AuditRecord,
    Preview,
    PreviewStatus,
    SlackReviewMessage,
    SlackUserLink,
)
from refunds.models import Order, Refund
from tests.console.conftest import bulk_previews, confirmed, logged_in, make_reviewer, proposed
from tests.console.fake_slack import (
    CHANNEL,
    SIGNING_SECRET,
    TOKEN,
    FakeSlack,
    button,
    button_click,
    reject_submission,
    signed,
    user,
)
from tests.factories import OrderFactory, UserFactory

URL = "/integrations/slack/interactions"
BASE = "https://gateway.example.test"


@pytest.fixture
def fake_slack(settings):
    fake = FakeSlack().start()
    settings.SLACK_BOT_TOKEN = TOKEN
    settings.SLACK_SIGNING_SECRET = SIGNING_SECRET
    settings.SLACK_REVIEW_CHANNEL = CHANNEL
    settings.SLACK_API_URL = fake.url
    settings.PUBLIC_BASE_URL = BASE
    yield fake
    fake.stop()


@pytest.fixture
def waiting(fake_slack, big_order, django_capture_on_commit_callbacks):
    """Alice's refund above the threshold, confirmed by her: it starts waiting for staff and is posted."""
    with django_capture_on_commit_callbacks(execute=True):
        preview = confirmed(proposed(big_order.customer, big_order.number, 12000))
    assert preview.status == PreviewStatus.AWAITING_STAFF
    return preview


@pytest.fixture
def rita(db, fake_slack):
    """A refund reviewer whose Slack account's confirmed email is her staff email."""
    person = make_reviewer("rita")
    fake_slack.users["U0RITA"] = user("U0RITA", person.email)
    return person


def post(client, payload, *, secret=SIGNING_SECRET, timestamp=None):
    body, headers = signed(payload, secret, timestamp=timestamp)
    return client.post(URL, data=body, content_type="application/x-www-form-urlencoded", **headers)


@pytest.fixture
def click(client, django_capture_on_commit_callbacks):
    """Send a signed interaction as Slack would, running what its transaction hands on at commit."""

    def send(payload, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return post(client, payload, **kwargs)

    return send


def blocks_text(message) -> str:
    """Every piece of text a reviewer reads in the message (the sections, fields, header, buttons)."""
    parts = []
    for block in message["blocks"]:
        for key in ("text",):
            if isinstance(block.get(key), dict):
                parts.append(block[key]["text"])
        parts += [f["text"] for f in block.get("fields", [])]
        parts += [e["text"] for e in block.get("elements", []) if isinstance(e.get("text"), str)]
        parts += [e["text"]["text"] for e in block.get("elements", []) if isinstance(e.get("text"), dict)]
    return "\n".join(parts)


def action_ids(message) -> set[str]:
    return {e["action_id"] for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]}


def decision_records(preview):
    return list(
        AuditRecord.objects.filter(
            preview=preview, event__in=[AuditEvent.APPROVED, AuditEvent.REJECTED, AuditEvent.DECISION_REFUSED]
        ).order_by("id")
    )


def refused_count(reason: str) -> float:
    return requests_refused.labels(reason)._value.get()


# Posting ------------------------------------------------------------------------------------------


def test_a_preview_that_starts_waiting_for_staff_is_posted_as_the_console_summarises_it(waiting, fake_slack):
    [call] = fake_slack.calls_to("chat.postMessage")
    assert call.token == TOKEN and call.params["channel"] == CHANNEL
    message = fake_slack.only_message()
    text = blocks_text(message)
    assert "Refund €120.00 on o-77 for customer “alice”" in text
    assert "*Action*\nrefund_order" in text and "*Subject*\norder o-77" in text and "*Amount*\n€120.00" in text
    assert "customer “alice” (“alice@example.test”)" in text
    assert "Remaining refundable: “€500.00”" in text  # a verified fact, from the order
    assert "1 staff approval needed" in text
    assert re.search(r"\*Expires\*\nin \d+\s(minutes|hours) \(<!date\^\d+\^", text)
    assert "First refund of this customer" in text  # the risk flag the console shows
    assert action_ids(message) == {"approve", "reject", "open_console"}
    value = f"{waiting.pk}:{waiting.digest}:{waiting.subject_version}"
    assert button(message, "approve")["value"] == value == button(message, "reject")["value"]
    assert button(message, "open_console")["url"] == f"{BASE}/console/previews/{waiting.pk}/"
    stored = SlackReviewMessage.objects.get(preview=waiting)
    assert (stored.channel, stored.ts, stored.with_buttons) == (CHANNEL, message["ts"], True)


def test_what_the_customer_chose_is_escaped_and_marked_as_theirs(db, fake_slack, django_capture_on_commit_callbacks):
    customer = UserFactory(username="<!channel> *pay* <https://evil.test|approve me> & co")
    order = OrderFactory(number="o-90", customer=customer, currency="EUR", total_minor=50000)
    with django_capture_on_commit_callbacks(execute=True):
        confirmed(proposed(customer, order.number, 12000))
    message = fake_slack.only_message()
    text = blocks_text(message) + message["text"]
    assert "<!channel>" not in text and "<https://evil.test" not in text
    assert "customer “ *pay* &lt;https://evil.test|approve me&gt; &amp; co”" in text


def test_slack_unset_posts_nothing_and_the_endpoint_is_not_found(settings, big_order, client, fake_slack):
    settings.SLACK_BOT_TOKEN = ""
    confirmed(proposed(big_order.customer, big_order.number, 12000))
    assert reviews_sync().posted == 0
    response = post(client, {"type": "block_actions"})
    assert response.status_code == 404
    assert fake_slack.calls == []


def test_a_burst_is_one_summary_message_without_buttons(fake_slack, alice, big_order):
    previews = bulk_previews(slack_module.MESSAGES_PER_BATCH + 5, customer=alice, order_number=big_order.number)
    report = reviews_sync()
    assert report.summarised == len(previews) and report.posted == 0
    [call] = fake_slack.calls_to("chat.postMessage")
    assert call.params["text"].startswith(f"{len(previews)} previews wait for staff review")
    assert "/console/" in call.params["text"]
    assert action_ids(fake_slack.only_message()) == set()
    assert SlackReviewMessage.objects.filter(with_buttons=False).count() == len(previews)
    assert reviews_sync().summarised == 0  # told once


def test_a_rate_limit_is_waited_out_not_retried(fake_slack, waiting, alice, big_order):
    SlackReviewMessage.objects.all().delete()
    fake_slack.calls.clear()
    fake_slack.rate_limit_next(1, retry_after=30)
    report = reviews_sync()
    assert report.rate_limited_for == 30 and report.posted == 0
    assert len(fake_slack.calls_to("chat.postMessage")) == 1
    assert reviews_sync().posted == 0  # within Retry-After: no call at all
    assert len(fake_slack.calls) == 1
    assert 29 < slack_module.paused_for() <= 30
    from django.core.cache import cache

    cache.delete(PAUSE_KEY)  # Retry-After has passed
    assert reviews_sync().posted == 1
    assert len(fake_slack.calls_to("chat.postMessage")) == 2


# Deciding ----------------------------------------------------------------------------------------


def test_a_reviewer_mapped_by_email_approves_and_the_message_becomes_the_outcome(waiting, rita, fake_slack, click):
    message = fake_slack.only_message()
    response = click(button_click(message, "approve", "U0RITA"))
    assert response.status_code == 200
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.EXECUTED  # the click's commit ran the worker (eager)
    assert Refund.objects.get(preview=waiting).amount_minor == waiting.amount_minor
    assert Order.objects.get(number=waiting.subject_id).refunded_minor == waiting.amount_minor
    approval = Approval.objects.get(preview=waiting, role=ApprovalRole.STAFF)
    assert approval.approver == rita and approval.basis == "slack:U0RITA" and approval.digest == waiting.digest
    [record] = decision_records(waiting)
    assert record.event == AuditEvent.APPROVED and record.actor == rita
    assert record.approval_basis["basis"] == "slack:U0RITA"
    assert [c.params["user"] for c in fake_slack.calls_to("users.info")] == ["U0RITA"]
    assert fake_slack.calls_to("chat.update")
    assert action_ids(message) == {"open_console"}  # no stale button left
    assert "Approved by rita (in Slack)." in blocks_text(message)
    assert fake_slack.ephemerals == []


def test_a_linked_reviewer_rejects_with_a_reason_from_the_modal(waiting, fake_slack, click):
    ron = make_reviewer("ron")
    SlackUserLink.objects.create(user=ron, slack_user_id="U0RON")  # no email match needed
    message = fake_slack.only_message()
    assert click(button_click(message, "reject", "U0RON")).status_code == 200
    [modal] = fake_slack.views
    assert modal["private_metadata"] == f"{waiting.pk}:{waiting.digest}:{waiting.subject_version}"
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.AWAITING_STAFF  # the modal decides nothing yet
    assert click(reject_submission(modal, "U0RON", "Order already replaced by courier")).status_code == 200
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.REJECTED
    [record] = decision_records(waiting)
    assert record.event == AuditEvent.REJECTED and record.actor == ron
    assert record.result["channel"] == "slack:U0RON" and record.result["note"] == "Order already replaced by courier"
    assert fake_slack.calls_to("users.info") == []
    assert action_ids(message) == {"open_console"}
    assert "Rejected by ron in Slack, noting “Order already replaced by courier”." in blocks_text(message)


def test_a_reject_without_a_reason_keeps_the_modal_open(waiting, fake_slack, rita, click):
    click(button_click(fake_slack.only_message(), "reject", "U0RITA"))
    response = click(reject_submission(fake_slack.views[0], "U0RITA", "   "))
    assert response.json()["response_action"] == "errors" and set(response.json()["errors"]) == {"note"}
    assert response.json()["errors"]["note"].startswith("Say why")
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.AWAITING_STAFF


@pytest.mark.parametrize(
    "slack_user",
    [
        None,  # not in the workspace's users.info
        user("U0EVE", "rita@example.test", confirmed=False),  # rita's address, never confirmed
        user("U0EVE", "nobody@example.test"),  # no staff member has it
    ],
)
def test_an_unmapped_clicker_is_told_so_alone_and_nothing_is_decided(waiting, rita, fake_slack, click, slack_user):
    if slack_user:
        fake_slack.users["U0EVE"] = slack_user
    message = fake_slack.only_message()
    assert click(button_click(message, "approve", "U0EVE")).status_code == 200
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.AWAITING_STAFF
    assert not Approval.objects.filter(preview=waiting, role=ApprovalRole.STAFF).exists()
    assert decision_records(waiting) == []
    [told] = fake_slack.ephemerals
    assert told["user"] == "U0EVE" and told["channel"] == CHANNEL
    assert "Nothing was decided" in told["text"]
    assert action_ids(message) == {"approve", "reject", "open_console"}
    assert fake_slack.calls_to("chat.update") == []


def test_a_staff_member_with_an_explicit_link_is_not_matched_by_email_for_another_slack_user(
    waiting, rita, fake_slack, click
):
    SlackUserLink.objects.create(user=rita, slack_user_id="U0RITA2")
    click(button_click(fake_slack.only_message(), "approve", "U0RITA"))  # her email, but not her linked user
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.AWAITING_STAFF
    assert "Nothing was decided" in fake_slack.ephemerals[0]["text"]


def test_a_reviewer_of_another_action_is_refused(waiting, staff_without_permission, fake_slack, click):
    fake_slack.users["U0BILL"] = user("U0BILL", staff_without_permission.email)
    click(button_click(fake_slack.only_message(), "approve", "U0BILL"))
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.AWAITING_STAFF
    [record] = decision_records(waiting)
    assert record.event == AuditEvent.DECISION_REFUSED and record.actor == staff_without_permission
    assert record.result["error"]["code"] == "not_a_reviewer" and record.result["channel"] == "slack:U0BILL"
    assert "may not review this kind of action" in fake_slack.ephemerals[0]["text"]


def test_a_reviewer_of_another_action_cannot_open_the_reject_modal(
    waiting, staff_without_permission, fake_slack, click
):
    fake_slack.users["U0BILL"] = user("U0BILL", staff_without_permission.email)
    click(button_click(fake_slack.only_message(), "reject", "U0BILL"))
    assert fake_slack.views == []
    assert "may not review this kind of action" in fake_slack.ephemerals[0]["text"]


def test_the_proposer_cannot_approve_their_own_request_four_eyes(
    db, fake_slack, click, django_capture_on_commit_callbacks
):
    rita = make_reviewer("rita")  # a reviewer who is also the customer
    fake_slack.users["U0RITA"] = user("U0RITA", rita.email)
    order = OrderFactory(number="o-88", customer=rita, currency="EUR", total_minor=50000)
    with django_capture_on_commit_callbacks(execute=True):
        preview = confirmed(proposed(rita, order.number, 12000))
    click(button_click(fake_slack.only_message(), "approve", "U0RITA"))
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF
    [record] = decision_records(preview)
    assert record.event == AuditEvent.DECISION_REFUSED and record.result["error"]["code"] == "four_eyes"
    assert "another staff member must review it" in fake_slack.ephemerals[0]["text"]


def test_a_stale_button_after_the_order_changed_is_refused_and_the_message_says_superseded(
    waiting, rita, fake_slack, click
):
    Order.objects.filter(number="o-77").update(version=F("version") + 1, refunded_minor=100)
    message = fake_slack.only_message()
    click(button_click(message, "approve", "U0RITA"))
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.SUPERSEDED
    assert not Approval.objects.filter(preview=waiting, role=ApprovalRole.STAFF).exists()
    [record] = decision_records(waiting)
    assert record.event == AuditEvent.DECISION_REFUSED and record.result["error"]["code"] == "superseded"
    assert "out of date" in fake_slack.ephemerals[0]["text"]
    assert action_ids(message) == {"open_console"}
    assert message["blocks"][0]["text"]["text"] != "Waiting for staff review"


def test_a_button_with_another_digest_is_refused(waiting, rita, fake_slack, click):
    message = fake_slack.only_message()
    stale = f"{waiting.pk}:{'0' * 64}:{waiting.subject_version}"
    click(button_click(message, "approve", "U0RITA", value=stale))
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.AWAITING_STAFF
    [record] = decision_records(waiting)
    assert record.result["error"]["code"] == "digest_mismatch"
    assert "Review it again" in fake_slack.ephemerals[0]["text"]


def test_a_button_with_another_subject_version_is_refused(waiting, rita, fake_slack, click):
    stale = f"{waiting.pk}:{waiting.digest}:{waiting.subject_version + 1}"
    click(button_click(fake_slack.only_message(), "approve", "U0RITA", value=stale))
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.AWAITING_STAFF
    assert not Approval.objects.filter(preview=waiting, role=ApprovalRole.STAFF).exists()
    assert "not the version" in fake_slack.ephemerals[0]["text"]


# Signatures --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "kwargs"),
    [
        ("bad_signature", {"secret": "not-the-signing-secret"}),
        ("late", {"timestamp": -6 * 60}),  # seconds from now, when the test runs
        ("late", {"timestamp": 6 * 60}),
    ],
)
def test_a_request_not_signed_by_slack_just_now_is_refused_and_counted(
    waiting, rita, fake_slack, client, reason, kwargs
):
    if "timestamp" in kwargs:
        kwargs = {"timestamp": int(time.time()) + kwargs["timestamp"]}
    before = refused_count(reason)
    response = post(client, button_click(fake_slack.only_message(), "approve", "U0RITA"), **kwargs)
    assert response.status_code == 401
    assert refused_count(reason) == before + 1
    waiting.refresh_from_db()
    assert waiting.status == PreviewStatus.AWAITING_STAFF
    assert decision_records(waiting) == []
    assert fake_slack.calls_to("users.info") == []


def test_an_unsigned_request_is_refused_and_counted(waiting, fake_slack, client, caplog):
    before = refused_count("unsigned")
    body, _headers = signed(button_click(fake_slack.only_message(), "approve", "U0RITA"))
    response = client.post(URL, data=body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 401
    assert refused_count("unsigned") == before + 1
    assert "Slack interaction refused: unsigned" in caplog.text
    assert decision_records(waiting) == []


def test_a_replayed_request_is_refused(waiting, fake_slack, client, django_capture_on_commit_callbacks):
    ron = make_reviewer("ron")
    SlackUserLink.objects.create(user=ron, slack_user_id="U0RON")
    body, headers = signed(button_click(fake_slack.only_message(), "reject", "U0RON"))
    before = refused_count("replay")
    first = client.post(URL, data=body, content_type="application/x-www-form-urlencoded", **headers)
    again = client.post(URL, data=body, content_type="application/x-www-form-urlencoded", **headers)
    assert (first.status_code, again.status_code) == (200, 401)
    assert refused_count("replay") == before + 1
    assert len(fake_slack.views) == 1  # the replay opened nothing


# Later changes -----------------------------------------------------------------------------------


def test_a_console_decision_replaces_the_message_and_its_buttons_stop_working(
    waiting, rita, fake_slack, click, django_capture_on_commit_callbacks
):
    ron = make_reviewer("ron")
    message = fake_slack.only_message()
    approve = button_click(message, "approve", "U0RITA")  # drawn before the console decided
    with django_capture_on_commit_callbacks(execute=True):
        response = logged_in(ron).post(f"/console/previews/{waiting.pk}/approve", {"digest": waiting.digest})
    assert response.status_code == 302
    updates = fake_slack.calls_to("chat.update")
    assert updates and updates[0].params["channel"] == CHANNEL and updates[0].params["ts"] == message["ts"]
    assert action_ids(message) == {"open_console"}
    assert "Approved by ron." in blocks_text(message)
    click(approve)  # the stale button, clicked anyway
    assert Approval.objects.filter(preview=waiting, role=ApprovalRole.STAFF).get().approver == ron
    assert "already approved" in fake_slack.ephemerals[0]["text"]


def test_an_expired_preview_replaces_the_message(waiting, fake_slack, django_capture_on_commit_callbacks):
    Preview.objects.filter(pk=waiting.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert previews_expire_stale() == 1
    message = fake_slack.only_message()
    assert action_ids(message) == {"open_console"}
    assert message["blocks"][0]["text"]["text"].lower().startswith("expired")
    assert SlackReviewMessage.objects.get(preview=waiting).shown_status == PreviewStatus.EXPIRED


def test_a_failed_update_is_made_by_the_next_sync(waiting, fake_slack, django_capture_on_commit_callbacks):
    fake_slack.rate_limit_next(1, retry_after=1)
    Preview.objects.filter(pk=waiting.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        previews_expire_stale()
    message = fake_slack.only_message()
    assert "approve" in action_ids(message)  # Slack said wait
    from django.core.cache import cache

    cache.delete(PAUSE_KEY)
    assert reviews_sync().updated == 1
    assert action_ids(message) == {"open_console"}


# Linking in the console --------------------------------------------------------------------------


def test_an_unknown_clicker_links_their_slack_user_from_the_console_then_decides(waiting, fake_slack, click):
    ron = make_reviewer("ron")
    message = fake_slack.only_message()
    click(button_click(message, "approve", "U0RON"))
    [told] = fake_slack.ephemerals
    link = [e for b in told["blocks"] if b["type"] == "actions" for e in b["elements"]][0]["url"]
    assert link.startswith(f"{BASE}/console/slack/?token=")
    token = parse_qs(urlsplit(link).query)["token"][0]
    console = logged_in(ron)
    page = console.get(f"/console/slack/?token={token}")
    assert "U0RON" in page.content.decode()
    assert console.post("/console/slack/", {"token": token}).status_code == 302
    assert SlackUserLink.objects.get(user=ron).slack_user_id == "U0RON"
    click(button_click(message, "approve", "U0RON"))
    assert Approval.objects.get(preview=waiting, role=ApprovalRole.STAFF).approver == ron


def test_a_forged_link_token_links_nothing(waiting, fake_slack):
    ron = make_reviewer("ron")
    response = logged_in(ron).post("/console/slack/", {"token": "U0RON:forged"})
    assert response.status_code == 302
    assert not SlackUserLink.objects.exists()


def test_a_console_approval_of_a_quorum_refreshes_the_count_in_slack(
    settings, fake_slack, big_order, rita, django_capture_on_commit_callbacks
):
    settings.REVIEW_QUORUM = "refund_order:EUR:10000:2"
    with django_capture_on_commit_callbacks(execute=True):
        preview = confirmed(proposed(big_order.customer, big_order.number, 12000))
    message = fake_slack.only_message()
    assert "0 of 2 staff approvals" in blocks_text(message)

    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=preview.pk, approver=rita, role=ApprovalRole.STAFF, digest=preview.digest)

    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF  # one of two: the status stays
    assert fake_slack.calls_to("chat.update")
    assert "1 of 2 staff approvals" in blocks_text(fake_slack.only_message())
    assert {"approve", "reject"} <= action_ids(fake_slack.only_message())  # still decidable by another
