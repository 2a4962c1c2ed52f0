"""Invoice sends in the staff console: the detail page renders the email exactly as it will be sent."""

import json
import re

import pytest
from django.contrib.auth.models import Group

from approvals.models import Preview, PreviewStatus
from invoices.models import Delivery, Invoice
from tests.browser import ARTIFACTS, chromium, log_in_through, requires_chromium
from tests.conftest import agent_client_for
from tests.factories import StaffFactory


def _invoice_approver(username="ivy"):
    user = StaffFactory(username=username)
    user.groups.add(Group.objects.get(name="Invoice approvers"))
    return user


def _proposed_send(alice, recipient="accounts@example.test"):
    client = agent_client_for(alice, tools=("send_invoice",))
    response = client.post(
        "/api/agent/tool-calls",
        {"name": "send_invoice", "arguments": json.dumps({"invoice_id": "INV-17", "recipient": recipient})},
        format="json",
    )
    assert response.status_code == 201, response.json()
    return Preview.objects.get(pk=response.json()["preview"]["id"])


def test_the_detail_page_shows_the_exact_email_and_recipient(client, alice, inv17):
    preview = _proposed_send(alice)
    client.force_login(_invoice_approver())
    page = client.get(f"/console/previews/{preview.pk}/").content.decode()
    assert "Send invoice INV-17 to “accounts@example.test” (chosen by the agent) for customer “alice”" in page
    assert "The email exactly as it will be sent" in page
    assert "NOT a known billing contact" in page
    assert "invoice-INV-17.html" in page
    assert "Total due: €120.00" in page  # the plain-text version, verbatim

    body = client.get(f"/console/previews/{preview.pk}/document/body")
    assert body.status_code == 200
    assert "Consulting" in body.content.decode() and "€120.00" in body.content.decode()
    assert "sandbox" in body["Content-Security-Policy"]
    assert "frame-ancestors 'self'" in body["Content-Security-Policy"]
    assert body["X-Frame-Options"] == "SAMEORIGIN"
    attachment = client.get(f"/console/previews/{preview.pk}/document/attachment")
    assert "<h1" in attachment.content.decode() and "INV-17" in attachment.content.decode()
    assert client.get(f"/console/previews/{preview.pk}/document/other").status_code == 404


def test_a_changed_invoice_is_flagged_on_the_detail_page(client, alice, inv17):
    preview = _proposed_send(alice)
    Invoice.objects.filter(pk=inv17.pk).update(version=2, total_minor=99000)
    client.force_login(_invoice_approver())
    page = client.get(f"/console/previews/{preview.pk}/").content.decode()
    assert "no longer renders to what this preview was made from" in page


def test_refund_reviewers_cannot_see_invoice_sends(client, alice, inv17):
    preview = _proposed_send(alice)
    refund_reviewer = StaffFactory(username="rita")
    refund_reviewer.groups.add(Group.objects.get(name="Refund reviewers"))
    client.force_login(refund_reviewer)
    assert client.get(f"/console/previews/{preview.pk}/").status_code == 404
    assert client.get(f"/console/previews/{preview.pk}/document/body").status_code == 404
    client.force_login(alice)
    assert client.get(f"/console/previews/{preview.pk}/document/body").status_code == 403


def test_an_invoice_approver_approves_in_the_console_and_it_is_sent_once(
    client, alice, inv17, smtp_server, django_capture_on_commit_callbacks
):
    preview = _proposed_send(alice)
    client.force_login(_invoice_approver())
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/console/previews/{preview.pk}/approve", {"digest": preview.digest})
    assert response.status_code == 302
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    assert [m["rcpt_tos"] for m in smtp_server.messages] == [["accounts@example.test"]]
    assert Delivery.objects.get().preview_id == preview.pk
    page = client.get(f"/console/previews/{preview.pk}/").content.decode()
    assert "accepted by the mail server" in page


@pytest.mark.browser
@requires_chromium
def test_browser_a_reviewer_approves_an_invoice_send_and_sees_it_delivered(
    live_server, alice, inv17, smtp_server, settings
):
    from playwright.sync_api import expect

    settings.LOGIN_FAILURE_LIMIT = 10**6
    approver = _invoice_approver()
    approver.set_password("approver-pass-for-tests")
    approver.save()
    preview = _proposed_send(alice)
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        log_in_through(page, f"{live_server.url}/console/", "ivy", "approver-pass-for-tests")
        page.get_by_role(
            "link", name=re.compile("Send invoice INV-17 to “accounts@example.test” \\(chosen by the agent\\)")
        ).click()
        expect(page.get_by_role("region", name=re.compile("exactly as it will be sent"))).to_contain_text(
            "accounts@example.test"
        )
        frame = page.frame_locator("iframe.document-frame")
        expect(frame.locator("body")).to_contain_text("Consulting")
        page.screenshot(path=str(ARTIFACTS / "console-invoice.png"), full_page=True)
        page.get_by_role("button", name=re.compile(r"^Approve")).click()
        expect(page.locator("[data-status]")).to_contain_text(re.compile("Completed|Executed|sent", re.I))
        expect(page.locator("body")).to_contain_text("accepted by the mail server")
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXECUTED
    assert [m["rcpt_tos"] for m in smtp_server.messages] == [["accounts@example.test"]]
