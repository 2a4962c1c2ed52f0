"""Issue 37: only the open state tab looks selected (the states' colours are small dots, not fills), and the
console's nav names the audit page for what it is, an export."""

import pytest

from tests.browser import chromium, requires_chromium
from tests.factories import OrderFactory

from .conftest import confirmed, make_reviewer, proposed
from .test_queue_browser import axe_violations, session_cookie

pytestmark = [pytest.mark.browser, requires_chromium]

LOOK = """tab => { const s = getComputedStyle(tab);
  return [s.backgroundColor, s.borderTopColor, s.borderTopWidth, s.borderLeftWidth, s.fontWeight].join(' '); }"""


def test_only_the_open_tab_looks_selected_and_the_audit_page_is_named_an_export(live_server, alice):
    from playwright.sync_api import expect

    for number in ("o-61", "o-62"):
        OrderFactory(number=number, customer=alice, currency="EUR", total_minor=50000)
    confirmed(proposed(alice, "o-61", 12000))  # waits for staff
    proposed(alice, "o-62", 12000)  # waits for the customer
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
        context.add_cookies([session_cookie(make_reviewer("sam"), live_server.url)])
        page = context.new_page()
        page.goto(f"{live_server.url}/console/")
        tabs = page.locator("nav.state-tabs a.state-tab")
        current = page.locator('nav.state-tabs a.state-tab[aria-current="true"]')
        expect(current).to_have_count(1)
        looks = {
            tabs.nth(i).evaluate(LOOK)
            for i in range(tabs.count())
            if tabs.nth(i).get_attribute("aria-current") != "true"
        }
        assert len(looks) == 1, looks  # every other tab, counted or empty, has the same fill and border
        assert current.evaluate(LOOK) not in looks
        assert axe_violations(page) == []

        page.get_by_role("link", name="Audit log", exact=True).click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Audit log")
        expect(page.locator("#events tbody tr").first).to_be_visible()
        assert axe_violations(page) == []
        page.get_by_role("link", name="Audit export", exact=True).click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Export the audit log")
        assert axe_violations(page) == []
        context.close()
