"""Issue 37: the console's shortcuts after the mouse. A checkbox ticked (or a button pressed) with the mouse
keeps the focus but takes no letters, so the shortcuts still work; `c` puts the focus on the amount, the
field a reviewer types into, not on the form's hidden fingerprint."""

import re

import pytest

from tests.browser import ARTIFACTS, chromium, requires_chromium
from tests.factories import OrderFactory

from .conftest import confirmed, make_reviewer, proposed
from .test_queue_browser import axe_violations, session_cookie

pytestmark = [pytest.mark.browser, requires_chromium]


@pytest.fixture
def reviewer_page(live_server):
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
        context.add_cookies([session_cookie(make_reviewer("sam"), live_server.url)])
        yield context.new_page()
        context.close()


def test_shortcuts_work_after_a_row_is_ticked_with_the_mouse(live_server, reviewer_page, alice):
    from playwright.sync_api import expect

    for number in ("o-61", "o-62", "o-63"):
        OrderFactory(number=number, customer=alice, currency="EUR", total_minor=50000)
        confirmed(proposed(alice, number, 12000))
    page = reviewer_page
    page.goto(f"{live_server.url}/console/")
    rows = page.locator("tr.queue-row")
    expect(rows).to_have_count(3)

    rows.nth(0).locator("input.tick").click()
    expect(rows.nth(0).locator("input.tick")).to_be_focused()
    expect(page.locator("#bulk-count")).to_have_text("1 preview ticked.")
    page.keyboard.press("j")
    expect(rows.nth(1)).to_have_class(re.compile(r"\bcurrent\b"))
    page.keyboard.press("x")
    expect(page.locator("#bulk-count")).to_have_text("2 previews ticked.")
    page.keyboard.press("k")
    expect(rows.nth(0)).to_have_class(re.compile(r"\bcurrent\b"))
    assert axe_violations(page) == []

    page.keyboard.press("a")
    expect(page.get_by_role("heading", level=1)).to_have_text("Approve 2 previews?")


def test_a_letter_in_a_text_field_is_still_typed(live_server, reviewer_page, alice):
    from playwright.sync_api import expect

    OrderFactory(number="o-61", customer=alice, currency="EUR", total_minor=50000)
    confirmed(proposed(alice, "o-61", 12000))
    page = reviewer_page
    page.goto(f"{live_server.url}/console/")
    search = page.get_by_label("Search order, invoice, customer or recipient")
    search.click()
    page.keyboard.type("jok")
    expect(search).to_have_value("jok")
    expect(page.locator("tr.queue-row.current")).to_have_count(0)


def test_c_focuses_the_amount_and_a_works_after_a_mouse_click_on_a_checkbox(live_server, reviewer_page, alice):
    from playwright.sync_api import expect

    OrderFactory(number="o-77", customer=alice, currency="EUR", total_minor=50000)
    preview = confirmed(proposed(alice, "o-77", 12000))
    page = reviewer_page
    page.goto(f"{live_server.url}/console/previews/{preview.pk}/")

    page.keyboard.press("c")
    amount = page.get_by_label("Refund amount (EUR)")
    expect(amount).to_be_visible()
    expect(amount).to_be_focused()
    page.keyboard.type("80")
    expect(amount).to_have_value("80")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "detail-change-form-focused.png"))
    assert axe_violations(page) == []

    page.goto(f"{live_server.url}/console/previews/{preview.pk}/")
    page.locator("#then-next").click()
    expect(page.locator("#then-next")).to_be_focused()
    page.keyboard.press("a")
    expect(page.locator("#approve-button")).to_be_focused()
    expect(page.locator("#approve-button")).to_have_text("Press Enter to approve")
