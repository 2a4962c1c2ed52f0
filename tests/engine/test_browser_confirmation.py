"""The engine's confirmation in a real browser, on the toy action (no money): an agent proposes a
rename, the board's owner logs in, reads exactly what will change, confirms, and sees the outcome the
executor reported. Playwright drives Debian's Chromium (/usr/bin/chromium)."""

import re

import pytest

from approvals.core.services import agent_session_create
from approvals.models import Execution, PreviewStatus
from tests.browser import ARTIFACTS, agent_request, chromium, log_in_through, requires_chromium
from tests.engine.conftest import events
from tests.engine.factories import PASSWORD, BoardFactory, PersonFactory

pytestmark = [pytest.mark.browser, requires_chromium]


def test_the_owner_confirms_a_rename_in_the_browser(live_server, settings):
    from playwright.sync_api import expect

    settings.LOGIN_FAILURE_LIMIT = 10**6
    owner = PersonFactory(username="olga")
    board = BoardFactory(id="b-7", owner=owner, title="Roadmap")
    _session, token = agent_session_create(user=owner, tools=["rename_board"])

    status, answer = agent_request(
        f"{live_server.url}/api/agent/tool-calls",
        token,
        {"name": "rename_board", "arguments": {"board_id": "b-7", "title": "Plans for 2027"}},
    )
    assert status == 201, answer
    assert (answer["status"], answer["executed"]) == ("awaiting_customer", False)
    assert "amount_minor" not in answer["preview"] and "currency" not in answer["preview"]
    confirm_url = answer["preview"]["confirm_url"]

    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 390, "height": 844})
        log_in_through(page, confirm_url, "olga", PASSWORD)
        expect(page.get_by_role("heading", level=1)).to_have_text("Rename board b-7 to “Plans for 2027”")
        expect(page.locator(".fact", has_text="New title").locator("dd")).to_have_text("Plans for 2027")
        page_text = page.locator("main").inner_text()
        assert "0.00" not in page_text and "Amount" not in page_text  # an action without money shows none
        page.screenshot(path=str(ARTIFACTS / "engine-toy-preview.png"), full_page=True)

        page.get_by_role("button", name=re.compile(r"^Confirm")).click()

        expect(page).to_have_url(confirm_url)
        status_box = page.get_by_role("status")
        expect(status_box).to_contain_text("Board b-7 is now called “Plans for 2027”.")
        expect(page.get_by_role("button", name=re.compile(r"^Confirm"))).to_have_count(0)

    board.refresh_from_db()
    assert (board.title, board.version) == ("Plans for 2027", 2)
    execution = Execution.objects.get(preview_id=answer["preview"]["id"])
    assert (execution.outcome, execution.preview.status) == ("succeeded", PreviewStatus.EXECUTED)
    assert events(execution.preview)[:2] == ["proposed", "confirmed"]
