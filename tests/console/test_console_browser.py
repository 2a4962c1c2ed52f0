"""One real browser walk through the console: a reviewer logs in, opens the queue, reads the
detail page, approves, and sees the executed state.

Playwright drives Debian's Chromium (/usr/bin/chromium); it never downloads a browser of its own.
"""

import re

import pytest

from refunds.models import LocalGatewayRefund, Refund
from tests.browser import ARTIFACTS, chromium, log_in_through, requires_chromium
from tests.factories import OrderFactory

from .conftest import confirmed, make_reviewer, proposed

PASSWORD = "reviewer-pass-for-tests"

pytestmark = [
    pytest.mark.browser,
    requires_chromium,
]


def test_a_reviewer_approves_a_refund_in_the_console(live_server, alice, settings):
    from playwright.sync_api import expect

    settings.LOGIN_FAILURE_LIMIT = 10**6  # other runs' failed logins must not lock this one out
    reviewer = make_reviewer("sam")
    reviewer.set_password(PASSWORD)
    reviewer.save()
    order = OrderFactory(number="o-77", customer=alice, currency="EUR", total_minor=50000)
    preview = confirmed(proposed(alice, "o-77", 12000))

    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        log_in_through(page, f"{live_server.url}/console/", "sam", PASSWORD)
        expect(page.get_by_role("heading", level=1)).to_have_text("Review queue")
        row = page.get_by_role("row", name=re.compile("Refund €120.00 on o-77 for customer “alice”, damaged"))
        expect(row).to_contain_text("Waiting for staff review")
        expect(row).to_contain_text(re.compile(r"expires in (23|24)\s+hours"))
        page.screenshot(path=str(ARTIFACTS / "console-queue.png"), full_page=True)

        row.get_by_role("link").click()
        expect(page).to_have_url(f"{live_server.url}/console/previews/{preview.pk}/")
        verified = page.get_by_role("region", name=re.compile("Verified"))
        expect(verified).to_contain_text("Remaining refundable€500.00")
        expect(verified.get_by_role("row", name=re.compile("Amount is within what remains"))).to_contain_text("Passes")
        unverified = page.get_by_role("region", name=re.compile("Unverified"))
        expect(unverified).to_contain_text('"amount_minor":12000')  # the arguments' text as the client sent it
        expect(page.get_by_role("status")).to_contain_text("Waiting for staff review")
        page.screenshot(path=str(ARTIFACTS / "console-detail.png"), full_page=True)

        page.get_by_role("button", name=re.compile(r"^Approve")).click()

        expect(page).to_have_url(f"{live_server.url}/console/previews/{preview.pk}/")
        status_box = page.locator("[data-status]")
        expect(status_box).to_have_attribute("data-status", "executed")
        expect(status_box).to_contain_text("Completed")
        expect(status_box).to_contain_text("Refunded €120.00 on order o-77")
        expect(page.get_by_role("button", name=re.compile(r"^Approve"))).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "console-executed.png"), full_page=True)
        shown = status_box.inner_text()

    refund = Refund.objects.get()
    assert (refund.preview_id, refund.amount_minor, refund.currency, refund.order_id) == (
        preview.pk,
        12000,
        "EUR",
        order.pk,
    )
    assert refund.gateway_refund_id in shown
    assert LocalGatewayRefund.objects.get().idempotency_key == f"refund:{preview.pk}"
