"""A remote MCP client connects with OAuth, end to end: the official `mcp` SDK's OAuthClientProvider
against the live server, naming itself by a Client ID Metadata Document (served over https on
127.0.0.1), and Chromium, driven by Playwright, where the customer logs in and consents.

Discovery from the 401's `resource_metadata`, the authorization server's metadata, authorization with
PKCE in the browser, the token, tools/list and tools/call as the customer, a refresh (the SDK's own, on
an expired token), and revocation at the revocation endpoint, after which the token is refused."""

from __future__ import annotations

import asyncio
import os
import re
import time
from unittest import mock
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from django.core.cache import cache
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from approvals.models import AgentSession, AuditEvent, AuditRecord, Preview
from refunds.models import Order
from tests.browser import CHROMIUM, CHROMIUM_ARGS, requires_chromium
from tests.cimd_server import metadata_server
from tests.event_loops import run
from tests.factories import OrderFactory, UserFactory

PASSWORD = "pass-for-tests"  # tests.factories' password
CALLBACK = "http://127.0.0.1:33419/callback"

pytestmark = [pytest.mark.browser, requires_chromium]


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@pytest.fixture
def cimd(tmp_path, settings):
    cache.clear()
    with metadata_server(tmp_path) as server:
        settings.OAUTH_CIMD_TEST_LOOPBACK_CA_FILE = server.ca_file
        yield server


def test_the_official_sdk_connects_with_oauth_through_a_browser_consent(live_server, cimd, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    alice = UserFactory(username="alice")
    bob = UserFactory(username="bob")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    OrderFactory(number="o-17", customer=bob, currency="EUR", total_minor=1000)
    client_id = cimd.client_document("/mcp-client.json", CALLBACK, name="Remote test assistant")
    server_url = f"{live_server.url}/mcp"
    storage = MemoryStorage()
    seen: dict[str, object] = {}

    async def scenario() -> None:
        from playwright.async_api import async_playwright, expect

        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = await browser.new_page()
            callback: asyncio.Future[str] = asyncio.get_running_loop().create_future()

            async def on_callback(route) -> None:
                if not callback.done():
                    callback.set_result(route.request.url)
                await route.fulfill(status=200, content_type="text/plain", body="You can close this window.")

            await page.route(CALLBACK + "*", on_callback)

            async def redirect_handler(url: str) -> None:
                seen["authorization_url"] = url
                await page.goto(url)
                # The site's own login first, then back to the consent page.
                await expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/oauth/authorize/"))
                await page.get_by_label("Username").fill("alice")
                await page.get_by_label("Password").fill(PASSWORD)
                await page.get_by_role("button", name="Log in").click()
                await expect(page.get_by_role("heading", name="Let Remote test assistant act for you?")).to_be_visible()
                await expect(page.get_by_text("127.0.0.1", exact=True)).to_be_visible()
                await page.get_by_label("8 hours").check()
                await page.get_by_role("button", name="Allow").click()

            async def callback_handler() -> AuthorizationCodeResult:
                query = parse_qs(urlsplit(await asyncio.wait_for(callback, 30)).query)
                return AuthorizationCodeResult(
                    code=query["code"][0], state=query["state"][0], iss=query.get("iss", [None])[0]
                )

            provider = OAuthClientProvider(
                server_url=server_url,
                client_metadata=OAuthClientMetadata(
                    client_name="Remote test assistant",
                    redirect_uris=[CALLBACK],
                    grant_types=["authorization_code", "refresh_token"],
                    response_types=["code"],
                    token_endpoint_auth_method="none",
                ),
                storage=storage,
                redirect_handler=redirect_handler,
                callback_handler=callback_handler,
                client_metadata_url=client_id,
            )
            http = create_mcp_http_client(auth=provider)
            async with http, Client(streamable_http_client(server_url, http_client=http)) as client:
                listed = await client.list_tools()
                seen["tools"] = sorted(tool.name for tool in listed.tools)
                seen["first_access"] = storage.tokens.access_token
                foreign = await client.call_tool(
                    "refund_order", {"order_id": "o-17", "amount_minor": 500, "reason": "damaged"}
                )
                seen["foreign"] = (foreign.is_error, foreign.structured_content)
                # The access token has expired as far as the SDK knows: it refreshes before the call.
                provider.context.token_expiry_time = time.time() - 1
                mine = await client.call_tool(
                    "refund_order", {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}
                )
                seen["mine"] = (mine.is_error, mine.structured_content)
                seen["second_access"] = storage.tokens.access_token
                seen["refresh"] = storage.tokens.refresh_token
                metadata = provider.context.oauth_metadata
                seen["revocation_endpoint"] = str(metadata.revocation_endpoint)
            await browser.close()

    with mock.patch.dict(os.environ, {"DJANGO_ALLOW_ASYNC_UNSAFE": "true"}):
        run(scenario())

    # Discovery came from the 401: the authorization request is PKCE S256 for the resource /mcp.
    authorization = parse_qs(urlsplit(str(seen["authorization_url"])).query)
    assert urlsplit(str(seen["authorization_url"])).path == "/oauth/authorize/"
    assert authorization["client_id"] == [client_id]
    assert authorization["code_challenge_method"] == ["S256"]
    assert authorization["resource"] == [server_url]
    assert cimd.hits == ["/mcp-client.json"]

    session = AgentSession.objects.get()
    assert session.user == alice and session.oauth_application.client_id == client_id
    assert 8 * 3600 - 120 <= (session.expires_at - session.created_at).total_seconds() <= 8 * 3600
    assert "refund_order" in seen["tools"] and set(seen["tools"]) >= set(session.tools)

    # Bob's order is answered like one that does not exist; Alice's is proposed, as her session.
    is_error, foreign = seen["foreign"]
    assert is_error and foreign["error"]["code"] == "order_unavailable"
    is_error, mine = seen["mine"]
    assert not is_error, mine
    preview = Preview.objects.get()
    assert preview.actor == alice and preview.agent_session == session
    assert Order.objects.get(number="o-12").refunded_minor == 0  # proposed, waiting for her confirmation
    assert AuditRecord.objects.filter(agent_session=session, event=AuditEvent.PROPOSED).count() == 1

    # The refresh rotated the access token; the first one no longer works, the second does.
    assert seen["second_access"] != seen["first_access"]
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json", "Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28"}

    def mcp_status(token: object) -> int:
        return httpx.post(server_url, json=listing, headers={**headers, "Authorization": f"Bearer {token}"}).status_code

    assert mcp_status(seen["first_access"]) == 401
    assert mcp_status(seen["second_access"]) != 401

    # Revocation at the advertised endpoint ends the token and the agent session.
    assert seen["revocation_endpoint"] == f"{live_server.url}/oauth/revoke_token/"
    revoked = httpx.post(
        str(seen["revocation_endpoint"]), data={"client_id": client_id, "token": seen["second_access"]}
    )
    assert revoked.status_code == 200
    assert mcp_status(seen["second_access"]) == 401
    refused = httpx.post(
        f"{live_server.url}/oauth/token/",
        data={"grant_type": "refresh_token", "refresh_token": seen["refresh"], "client_id": client_id},
    )
    assert refused.status_code == 400
    session.refresh_from_db()
    assert session.revoked_at is not None
    assert AuditRecord.objects.filter(agent_session=session, event=AuditEvent.AGENT_SESSION_REVOKED).count() == 1


def test_the_consent_page_passes_axe_and_works_from_the_keyboard(live_server, cimd, settings):
    from playwright.sync_api import expect

    from tests.browser import chromium
    from tests.console.test_queue_browser import axe_violations, session_cookie

    alice = UserFactory(username="alice")
    client_id = cimd.client_document("/mcp-client.json", CALLBACK, name="Remote test assistant")
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "state": "s",
        "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        "code_challenge_method": "S256",
    }
    url = f"{live_server.url}/oauth/authorize/?{urlencode(query)}"
    with chromium() as browser:
        context = browser.new_context(bypass_csp=True)  # axe is injected
        context.add_cookies([session_cookie(alice, url)])
        page = context.new_page()
        page.goto(url)
        expect(page.get_by_role("heading", name="Let Remote test assistant act for you?")).to_be_visible()
        assert axe_violations(page) == []
        # From the keyboard: the lifetimes are one radio group, then Allow.
        page.get_by_label("1 hour").focus()
        page.keyboard.press("ArrowDown")
        expect(page.get_by_label("8 hours")).to_be_checked()
        page.get_by_role("button", name="Allow").focus()
        with page.expect_request(lambda request: request.url.startswith(CALLBACK)) as redirected:
            page.keyboard.press("Enter")
        assert "code=" in redirected.value.url
        context.close()
    session = AgentSession.objects.get()
    assert 8 * 3600 - 120 <= (session.expires_at - session.created_at).total_seconds() <= 8 * 3600
