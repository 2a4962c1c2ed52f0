"""One real browser walk: an agent proposes, alice logs in, confirms, and sees the completed refund.

Playwright drives Debian's Chromium (/usr/bin/chromium); it never downloads a browser of its own.
"""

import re

import pytest

from approvals.core.services import agent_session_create
from refunds.models import LocalGatewayRefund, Refund
from tests.browser import ARTIFACTS, agent_request, chromium, log_in_through, requires_chromium
from tests.factories import OrderFactory, UserFactory

PASSWORD = "correct horse battery staple"

pytestmark = [
    pytest.mark.browser,
    requires_chromium,
]


def test_alice_confirms_a_proposed_refund_in_the_browser(live_server, settings):
    from playwright.sync_api import expect

    # Failed-login counters live in the cache (Redis when REDIS_URL is set); don't let other runs lock us out.
    settings.LOGIN_FAILURE_LIMIT = 10**6
    alice = UserFactory(username="alice", password=PASSWORD)
    order = OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    _session, token = agent_session_create(user=alice, tools=["refund_order"])

    status, proposal = agent_request(
        f"{live_server.url}/api/agent/tool-calls",
        token,
        {"name": "refund_order", "arguments": {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}},
    )
    assert status == 201, proposal
    assert proposal["executed"] is False
    assert proposal["preview"]["currency"] == "EUR"
    confirm_url = proposal["preview"]["confirm_url"]
    assert confirm_url == f"{live_server.url}/previews/{proposal['preview']['id']}/"

    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1024, "height": 768})
        log_in_through(page, confirm_url, "alice", PASSWORD)
        expect(page.get_by_role("heading", level=1)).to_have_text("Refund €5.00 on order o-12")
        expect(page.locator(".fact", has_text="Refund amount").locator("dd")).to_have_text("€5.00")
        expect(page.locator(".fact", has_text="Left to refund after this").locator("dd")).to_have_text("€5.00")
        expect(page.get_by_role("status")).to_contain_text("Waiting for your confirmation")
        page.screenshot(path=str(ARTIFACTS / "preview.png"), full_page=True)

        page.get_by_role("button", name=re.compile(r"^Confirm")).click()

        expect(page).to_have_url(confirm_url)
        status_box = page.get_by_role("status")
        expect(status_box).to_contain_text("Completed.")
        expect(status_box).to_contain_text("Refunded €5.00 on order o-12")
        expect(page.get_by_role("button", name=re.compile(r"^Confirm"))).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "confirm.png"), full_page=True)
        shown = status_box.inner_text()

    refund = Refund.objects.get()
    assert (refund.amount_minor, refund.currency, refund.order_id) == (500, "EUR", order.pk)
    assert refund.gateway_refund_id in shown
    assert LocalGatewayRefund.objects.get().idempotency_key == f"refund:{refund.preview_id}"
    order.refresh_from_db()
    assert order.refunded_minor == 500

    # The agent now reads the outcome the worker reported, not its own guess.
    status, answer = agent_request(f"{live_server.url}/api/agent/previews/{refund.preview_id}", token)
    assert status == 200
    assert (answer["executed"], answer["status"]) == (True, "executed")
    assert answer["preview"]["result"]["refund_id"] == refund.gateway_refund_id
