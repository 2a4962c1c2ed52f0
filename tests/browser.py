"""Debian's Chromium for the browser tests, driven by Playwright (which never downloads a browser)."""

from __future__ import annotations

import json
import os
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from unittest import mock

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

# `make test` installs Chromium; only a run outside it may lack one. In CI a missing browser fails.
requires_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists() and os.environ.get("CI") != "true",
    reason=f"needs Debian's Chromium at {CHROMIUM} (make test installs it)",
)


@contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium under Playwright's sync API; on the way out, the browser and the database
    connections the test opened meanwhile are closed.

    Playwright keeps an event loop running on the test's thread. Django then takes the thread for an async
    one: its ORM calls are allowed for the duration (DJANGO_ALLOW_ASYNC_UNSAFE; they are synchronous), and
    the connections they open live in the loop's context, which the test database's teardown never sees
    (tests/event_loops.py, which does the same for asyncio)."""
    from django.db import connections
    from playwright.sync_api import sync_playwright

    with mock.patch.dict(os.environ, {"DJANGO_ALLOW_ASYNC_UNSAFE": "true"}), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
            connections.close_all()


def log_in(page: Page, username: str, password: str) -> None:
    """Fill the login page the browser is on (labels as a person reads them) and submit it."""
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def log_in_through(page: Page, url: str, username: str, password: str) -> None:
    """Open a page that needs a login: the login page comes first, naming the page to go back to, and
    after logging in the browser is on the page itself."""
    from playwright.sync_api import expect

    page.goto(url)
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=" + re.escape(urllib.parse.urlsplit(url).path)))
    log_in(page, username, password)
    expect(page).to_have_url(url)


def agent_request(url: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    """What an agent sends to the live test server: a GET, or a POST of `body` as JSON, with its bearer token."""
    request = urllib.request.Request(
        url,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - the live test server
        return response.status, json.load(response)
