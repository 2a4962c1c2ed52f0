"""The queue worked from the keyboard in Chromium, the pages at 390 px, and axe-core over every page
(no serious or critical violations). Screenshots land in test-artifacts/.

axe-core comes from the npm registry (`make axe`, run by `make test`, puts it in tests/vendor/).
"""

import re
from pathlib import Path

import pytest
from django.test import Client

from approvals.models import Preview, PreviewStatus
from refunds.models import Refund
from tests.browser import ARTIFACTS, chromium, requires_chromium
from tests.factories import OrderFactory

from .conftest import confirmed, make_reviewer, proposed

AXE = Path(__file__).resolve().parent.parent / "vendor" / "axe.min.js"

pytestmark = [pytest.mark.browser, requires_chromium]


def session_cookie(user, url):
    client = Client()
    client.force_login(user)
    return {"name": "sessionid", "value": client.cookies["sessionid"].value, "url": url}


def axe_violations(page):
    """Serious and critical axe-core violations on the page as it is now."""
    assert AXE.exists(), "axe-core is missing: run `make axe` (make test does)"
    page.add_script_tag(content=AXE.read_text())
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def no_horizontal_overflow(page):
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


@pytest.fixture
def browser_env(live_server, settings):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 10000}
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        yield browser


def test_the_queue_from_the_keyboard_with_bulk_approval(live_server, browser_env, alice):
    from playwright.sync_api import expect

    reviewer = make_reviewer("sam")
    previews = []
    for number in ("o-61", "o-62", "o-63"):
        OrderFactory(number=number, customer=alice, currency="EUR", total_minor=50000)
        previews.append(confirmed(proposed(alice, number, 12000 + len(previews))))

    context = browser_env.new_context(
        viewport={"width": 1280, "height": 900}, bypass_csp=True, timezone_id="Europe/Berlin"
    )
    context.add_cookies([session_cookie(reviewer, live_server.url)])
    page = context.new_page()
    page.goto(f"{live_server.url}/console/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Review queue")
    rows = page.locator("tr.queue-row")
    expect(rows).to_have_count(3)
    # Times are shown in the viewer's timezone, with the zone.
    expect(page.locator("time[data-localised]").first).to_contain_text(re.compile(r"GMT\+1|CET"))

    page.keyboard.press("j")
    expect(rows.nth(0)).to_have_class(re.compile("current"))
    page.keyboard.press("j")
    page.keyboard.press("k")
    expect(rows.nth(0)).to_have_class(re.compile("current"))
    page.keyboard.press("x")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("x")
    expect(page.locator("#bulk-count")).to_have_text("2 previews ticked.")
    page.screenshot(path=str(ARTIFACTS / "queue-keyboard.png"), full_page=True)
    assert axe_violations(page) == []

    page.keyboard.press("a")  # approve the ticked ones: a confirmation page first
    expect(page.get_by_role("heading", level=1)).to_have_text("Approve 2 previews?")
    assert axe_violations(page) == []
    page.screenshot(path=str(ARTIFACTS / "queue-bulk-confirm.png"), full_page=True)
    assert not Refund.objects.exists()
    page.keyboard.press("Enter")  # the confirm button has the focus
    expect(page.get_by_text("You approved 2 previews; each is recorded on its own.")).to_be_visible()
    assert {p.status for p in Preview.objects.filter(pk__in=[previews[0].pk, previews[2].pk])} == {
        PreviewStatus.EXECUTED
    }
    assert Preview.objects.get(pk=previews[1].pk).status == PreviewStatus.AWAITING_STAFF
    page.screenshot(path=str(ARTIFACTS / "queue-after-bulk.png"), full_page=True)

    # o: open the remaining one; a then Enter approves it on its page.
    page.keyboard.press("j")
    page.keyboard.press("o")
    expect(page).to_have_url(f"{live_server.url}/console/previews/{previews[1].pk}/")
    bar = page.locator("#decision-bar")
    expect(bar).to_be_visible()
    assert axe_violations(page) == []
    page.screenshot(path=str(ARTIFACTS / "detail-decision-bar.png"))
    page.mouse.wheel(0, 1500)
    expect(bar).to_be_in_viewport()  # sticky: the decision stays in reach
    page.keyboard.press("a")
    expect(page.locator("#approve-button")).to_have_text("Press Enter to approve")
    page.keyboard.press("Enter")
    expect(page.locator("[data-status]")).to_have_attribute("data-status", "executed")
    assert Refund.objects.count() == 3
    context.close()


def test_the_pages_at_390_px_and_with_axe(live_server, browser_env, alice, settings):
    from playwright.sync_api import expect

    settings.REVIEW_QUORUM = "refund_order:EUR:20000:2"
    reviewer = make_reviewer("sam")
    OrderFactory(number="o-64", customer=alice, currency="EUR", total_minor=50000)
    waiting = confirmed(proposed(alice, "o-64", 25000))
    from approvals.core.services import preview_approve
    from approvals.models import ApprovalRole

    preview_approve(
        preview_id=waiting.pk, approver=make_reviewer("ron"), role=ApprovalRole.STAFF, digest=waiting.digest
    )
    OrderFactory(number="o-65", customer=alice, currency="EUR", total_minor=9000)
    to_confirm = proposed(alice, "o-65", 3000)
    from approvals.core.counter import preview_counter_propose

    OrderFactory(number="o-67", customer=alice, currency="EUR", total_minor=50000)
    countered = confirmed(proposed(alice, "o-67", 15000))
    changed = preview_counter_propose(
        preview_id=countered.pk, reviewer=reviewer, digest=countered.digest, values={"amount": "80"}
    )

    staff = browser_env.new_context(viewport={"width": 390, "height": 844}, bypass_csp=True, is_mobile=True)
    staff.add_cookies([session_cookie(reviewer, live_server.url)])
    page = staff.new_page()
    for name, path in [
        ("queue", "/console/"),
        ("detail", f"/console/previews/{waiting.pk}/"),
        ("timeline", f"/console/previews/{waiting.pk}/audit/"),
    ]:
        page.goto(live_server.url + path)
        page.screenshot(path=str(ARTIFACTS / f"390-{name}.png"), full_page=True)
        assert no_horizontal_overflow(page), name
        assert axe_violations(page) == [], name
    page.goto(f"{live_server.url}/console/previews/{waiting.pk}/")
    expect(page.locator("#quorum")).to_have_text("1 of 2 staff approvals")
    staff.close()

    customer = browser_env.new_context(
        viewport={"width": 390, "height": 844}, bypass_csp=True, is_mobile=True, timezone_id="America/New_York"
    )
    customer.add_cookies([session_cookie(alice, live_server.url)])
    page = customer.new_page()
    pages = [
        ("customer-confirm", f"/previews/{to_confirm.pk}/"),
        ("customer-waiting", f"/previews/{waiting.pk}/"),
        ("my-requests", "/previews/"),
        ("my-orders", "/orders/"),
        ("customer-changed-old", f"/previews/{countered.pk}/"),
        ("customer-changed-new", f"/previews/{changed.pk}/"),
    ]
    for name, path in pages:
        page.goto(live_server.url + path)
        page.screenshot(path=str(ARTIFACTS / f"390-{name}.png"), full_page=True)
        assert no_horizontal_overflow(page), name
        assert axe_violations(page) == [], name
    page.goto(f"{live_server.url}/previews/{to_confirm.pk}/")
    expect(page.locator("time[data-localised]").first).to_contain_text(re.compile(r"EST|EDT|GMT-[45]"))
    expect(page.locator("#deadline-words")).to_contain_text("in 1")
    page.get_by_text("Decline…").click()
    page.get_by_label(re.compile("Why")).fill("Not needed any more")
    page.get_by_role("button", name="Decline this request").click()
    expect(page.locator("[data-status]")).to_have_attribute("data-status", "declined")
    assert Preview.objects.get(pk=to_confirm.pk).failure_reason == "The customer declined."
    customer.close()


def test_the_waiting_page_updates_itself_when_staff_decide(live_server, browser_env, alice):
    from playwright.sync_api import expect

    OrderFactory(number="o-66", customer=alice, currency="EUR", total_minor=50000)
    waiting = confirmed(proposed(alice, "o-66", 12000))
    context = browser_env.new_context(viewport={"width": 800, "height": 800})
    context.add_cookies([session_cookie(alice, live_server.url)])
    page = context.new_page()
    polls = []
    page.on("request", lambda request: polls.append(request.url) if request.url.endswith("/status") else None)
    page.goto(f"{live_server.url}/previews/{waiting.pk}/")
    expect(page.locator("[data-status]")).to_have_attribute("data-status", "awaiting_staff")
    page.wait_for_timeout(3500)
    assert len(polls) >= 1  # the script asks for the status, not the whole page

    from approvals.core.services import preview_approve
    from approvals.models import ApprovalRole

    preview_approve(
        preview_id=waiting.pk, approver=make_reviewer("rita"), role=ApprovalRole.STAFF, digest=waiting.digest
    )
    expect(page.locator("[data-status]")).to_have_attribute("data-status", "executed", timeout=15000)
    page.screenshot(path=str(ARTIFACTS / "customer-updated.png"), full_page=True)
    context.close()
