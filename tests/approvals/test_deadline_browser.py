"""Issue 37: the confirmation page's deadline follows the clock in Chromium ("in less than a minute", then
"the time to confirm has passed", never "in 0 minutes"), and a click after it is told once."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Preview
from tests.browser import chromium, requires_chromium
from tests.conftest import propose
from tests.console.test_queue_browser import axe_violations, session_cookie

pytestmark = [pytest.mark.browser, requires_chromium]


def test_the_deadline_counts_down_and_a_late_click_is_told_once(live_server, alice, o12, alice_agent):
    from playwright.sync_api import expect

    answer = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged").json()
    preview_id = answer["preview"]["id"]

    with chromium() as browser:
        context = browser.new_context(viewport={"width": 900, "height": 900}, bypass_csp=True)
        context.add_cookies([session_cookie(alice, live_server.url)])
        page = context.new_page()
        # The deadline starts once the browser is up, and leaves a loaded machine time to show the page.
        Preview.objects.filter(pk=preview_id).update(expires_at=timezone.now() + timedelta(seconds=10))
        page.goto(f"{live_server.url}/previews/{preview_id}/")
        deadline = page.locator("#deadline-words")
        expect(deadline).to_have_text("in less than a minute")
        assert axe_violations(page) == []
        expect(deadline).to_have_text("the time to confirm has passed", timeout=20000)

        page.get_by_role("button", name=re.compile(r"^Confirm")).click()
        expect(page.locator("[data-status]")).to_have_attribute("data-status", "expired")
        expect(page.get_by_role("alert")).to_have_count(0)
        expect(page.get_by_text(re.compile("in time; nothing was done"))).to_have_count(1)
        assert axe_violations(page) == []
        context.close()
