"""Debian's Chromium for the browser tests, driven by Playwright (which never downloads a browser)."""

import json
import os
import urllib.request
from pathlib import Path

import pytest

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


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def log_in(page, username: str, password: str) -> None:
    """Fill the login page the browser is on (labels as a person reads them) and submit it."""
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


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
