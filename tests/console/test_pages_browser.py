"""The support pages in Chromium with axe-core (no serious or critical violations): the customer's orders
at 375 px with the Refundable column in view, the app's 404 and 500 pages, and the console's new pages
(a preview's notes and customer history, the agent sessions, a new refund)."""

import pytest
from django.http import HttpRequest, HttpResponse
from django.urls import path

from config import urls as app_urls
from tests.browser import ARTIFACTS, chromium, requires_chromium
from tests.conftest import agent_client_for
from tests.factories import OrderFactory

from .conftest import confirmed, make_reviewer, proposed
from .test_queue_browser import axe_violations, no_horizontal_overflow, session_cookie

pytestmark = [pytest.mark.browser, requires_chromium]


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("secret-internal-detail")


urlpatterns = [path("boom/", boom), *app_urls.urlpatterns]


def test_the_refundable_column_is_in_view_on_a_phone(live_server, alice):
    from playwright.sync_api import expect

    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=123456, refunded_minor=2000)
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 375, "height": 740}, bypass_csp=True)
        context.add_cookies([session_cookie(alice, live_server.url)])
        page = context.new_page()
        page.goto(f"{live_server.url}/orders/")
        cell = page.locator("td.refundable").first
        expect(cell).to_be_visible()
        expect(cell).to_contain_text("€1,214.56")
        box = cell.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375, box
        label = cell.evaluate("el => getComputedStyle(el, '::before').content")
        assert label == '"Refundable"'
        assert no_horizontal_overflow(page)
        page.screenshot(path=str(ARTIFACTS / "orders-375.png"), full_page=True)
        assert axe_violations(page) == []
        context.close()


@pytest.mark.urls(__name__)
def test_the_apps_404_and_500_pages(live_server, alice):
    from playwright.sync_api import expect

    with chromium() as browser:
        context = browser.new_context(viewport={"width": 375, "height": 740}, bypass_csp=True)
        context.add_cookies([session_cookie(alice, live_server.url)])
        page = context.new_page()
        missing = page.goto(f"{live_server.url}/no-such-page/")
        assert missing is not None and missing.status == 404
        expect(page.get_by_role("heading", level=1)).to_have_text("Page not found")
        assert axe_violations(page) == []
        broken = page.goto(f"{live_server.url}/boom/")
        assert broken is not None and broken.status == 500
        expect(page.get_by_role("heading", level=1)).to_have_text("Something went wrong")
        assert "secret-internal-detail" not in page.content()
        assert axe_violations(page) == []
        context.close()


def test_the_console_support_pages(live_server, big_order, alice, django_capture_on_commit_callbacks):
    from playwright.sync_api import expect

    sam = make_reviewer("sam")
    OrderFactory(number="o-5", customer=alice, currency="EUR", total_minor=5000)
    with django_capture_on_commit_callbacks(execute=True):
        confirmed(proposed(alice, "o-5", 1000))
    preview = confirmed(proposed(alice, big_order.number, 12000))
    agent_client_for(alice, label="phone assistant")
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
        context.add_cookies([session_cookie(sam, live_server.url)])
        page = context.new_page()

        page.goto(f"{live_server.url}/console/previews/{preview.pk}/")
        expect(page.locator("#history-summary")).to_contain_text("Across all their orders: 1, €10.00 in total.")
        page.get_by_label("Internal note (staff only; the customer and the agent never see it)").fill("Called her.")
        page.get_by_role("button", name="Add the note").click()
        expect(page.locator(".internal-note")).to_contain_text("Called her.")
        assert axe_violations(page) == []

        page.goto(f"{live_server.url}/console/agent-sessions/")
        expect(page.get_by_role("columnheader", name="Last used")).to_be_visible()
        assert axe_violations(page) == []

        page.goto(f"{live_server.url}/console/payments/new-refund")
        page.get_by_label("Order number").fill("o-5")
        page.get_by_label("Amount to refund").fill("5.00")
        page.get_by_label("Reason").select_option("damaged")
        assert axe_violations(page) == []
        page.get_by_role("button", name="Propose this refund").click()
        expect(page.get_by_role("heading", level=1)).to_contain_text("€5.00")
        expect(page.locator(".alert-success")).to_contain_text("you cannot approve it yourself")
        assert axe_violations(page) == []
        context.close()
