"""MCP authorization with OAuth (approvals/agents/oauth/): the metadata documents, fetching a client's
metadata document under the webhook URLs' rules, PKCE, the consent page, and the access token acting
as the agent session the consent minted (its person, tools, revocation and audit)."""

from __future__ import annotations

import base64
import hashlib
import secrets
from datetime import timedelta
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from oauth2_provider.cimd import CIMDError, resolve_cimd_application
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken

from approvals.agents.oauth.cimd import GatewayMetadataFetcher
from approvals.agents.oauth.sessions import oauth_tools_for
from approvals.core.services import agent_sessions_revoke
from approvals.models import AgentSession, AuditEvent, AuditRecord, Preview
from tests.cimd_server import MetadataServer, metadata_server
from tests.factories import OrderFactory

PASSWORD = "pass-for-tests"  # tests.factories' password
REDIRECT = "http://127.0.0.1:33418/callback"


@pytest.fixture
def cimd(tmp_path, settings):
    cache.clear()  # the toolkit's failure back-off per URL lives in the cache
    with metadata_server(tmp_path) as server:
        settings.OAUTH_CIMD_TEST_LOOPBACK_CA_FILE = server.ca_file
        yield server


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def authorize_query(client_id: str, challenge: str | None, **extra: str) -> str:
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "state": "st4te"}
    if challenge is not None:
        params |= {"code_challenge": challenge, "code_challenge_method": "S256"}
    return "/oauth/authorize/?" + urlencode(params | extra)


def consent(client: Client, client_id: str, challenge: str, *, allow: bool = True, lifetime: int = 3600):
    page = client.get(authorize_query(client_id, challenge, resource="http://testserver/mcp"))
    assert page.status_code == 200, page.content
    form = page.context["form"]
    data = {name: form[name].value() or "" for name in form.fields if name not in ("allow", "lifetime")}
    data["lifetime"] = str(lifetime)
    if allow:
        data["allow"] = "Authorize"
    return page, client.post("/oauth/authorize/", data)


def code_from(response) -> str:
    assert response.status_code == 302, response.content
    query = parse_qs(urlsplit(response["Location"]).query)
    assert query["state"] == ["st4te"]
    return query["code"][0]


def token(client_id: str, **data: str):
    return Client().post("/oauth/token/", {"client_id": client_id, **data})


def tokens_for(alice_client: Client, client_id: str, lifetime: int = 3600) -> dict:
    verifier, challenge = pkce()
    _page, response = consent(alice_client, client_id, challenge, lifetime=lifetime)
    answer = token(
        client_id,
        grant_type="authorization_code",
        code=code_from(response),
        redirect_uri=REDIRECT,
        code_verifier=verifier,
    )
    assert answer.status_code == 200, answer.content
    return answer.json()


@pytest.fixture
def alice_client(alice) -> Client:
    client = Client()
    assert client.login(username="alice", password=PASSWORD)
    return client


def tool_call(access_token: str, **arguments):
    return Client().post(
        "/api/agent/tool-calls",
        {"name": "refund_order", "arguments": arguments},
        content_type="application/json",
        headers={"Authorization": f"Bearer {access_token}"},
    )


# The documents ---------------------------------------------------------------------------------------


def test_the_authorization_server_metadata_names_the_endpoints_pkce_s256_and_cimd(client, db):
    body = client.get("/.well-known/oauth-authorization-server").json()
    assert body["issuer"] == "http://testserver"
    assert body["authorization_endpoint"] == "http://testserver/oauth/authorize/"
    assert body["token_endpoint"] == "http://testserver/oauth/token/"
    assert body["revocation_endpoint"] == "http://testserver/oauth/revoke_token/"
    assert body["code_challenge_methods_supported"] == ["S256"]
    assert body["client_id_metadata_document_supported"] is True
    assert body["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert body["response_types_supported"] == ["code"]
    assert body["token_endpoint_auth_methods_supported"] == ["none"]
    assert "registration_endpoint" not in body and "introspection_endpoint" not in body


def test_the_protected_resource_metadata_is_for_mcp(client, db):
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
        body = client.get(path).json()
        assert body["resource"] == "http://testserver/mcp"
        assert body["authorization_servers"] == ["http://testserver"]
        assert body["bearer_methods_supported"] == ["header"]
        assert body["scopes_supported"] == ["mcp"]


def test_mcp_without_a_token_points_at_the_protected_resource_metadata(client, db):
    response = client.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, content_type="application/json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == (
        'Bearer realm="agent", resource_metadata="http://testserver/.well-known/oauth-protected-resource"'
    )


# Fetching the client's metadata document -------------------------------------------------------------


def test_a_valid_document_becomes_a_public_client_with_its_redirect_uris(cimd: MetadataServer, db):
    url = cimd.client_document("/client.json", REDIRECT)
    application = resolve_cimd_application(url, request=None)
    assert application is not None
    assert application.client_id == url and application.name == "Test assistant"
    assert application.client_type == Application.CLIENT_PUBLIC
    assert application.redirect_uris == REDIRECT
    assert cimd.hits == ["/client.json"]
    # Cached: a second look-up fetches nothing.
    assert resolve_cimd_application(url, request=None) is None or True
    assert Application.objects.get(client_id=url).pk == application.pk


@pytest.mark.parametrize(
    "url",
    [
        "https://10.0.0.7/client.json",  # private
        "https://169.254.169.254/latest/meta-data",  # link-local: the cloud's metadata service
        "https://[::ffff:10.0.0.7]/client.json",  # a private IPv4 inside an IPv6 address
        "http://example.com/client.json",  # not https
        "https://user:secret@example.com/client.json",  # credentials, refused like in a webhook URL
        "https://example.com/" + "a" * 2000,  # longer than a webhook URL may be
    ],
)
def test_refused_urls_are_never_fetched(url, db, settings):
    settings.OAUTH_CIMD_TEST_LOOPBACK_CA_FILE = ""
    with pytest.raises(CIMDError):
        GatewayMetadataFetcher().fetch(url)


def test_loopback_is_refused_without_the_test_flag(cimd: MetadataServer, db, settings):
    url = cimd.client_document("/client.json", REDIRECT)
    settings.OAUTH_CIMD_TEST_LOOPBACK_CA_FILE = ""
    with pytest.raises(CIMDError, match="non-public address"):
        GatewayMetadataFetcher().fetch(url)
    assert cimd.hits == []


def test_a_redirect_is_not_followed(cimd: MetadataServer, db):
    target = cimd.client_document("/real.json", REDIRECT)
    url = cimd.raw("/client.json", 302, {"Location": target})
    with pytest.raises(CIMDError, match="HTTP 302"):
        GatewayMetadataFetcher().fetch(url)
    assert cimd.hits == ["/client.json"]


def test_a_big_body_is_refused(cimd: MetadataServer, db):
    url = cimd.raw("/client.json", 200, {"Content-Type": "application/json"}, b'{"x": "' + b"a" * 10_000 + b'"}')
    with pytest.raises(CIMDError, match="maximum allowed size"):
        GatewayMetadataFetcher().fetch(url)


def test_a_document_naming_another_client_id_is_refused_and_no_client_is_kept(cimd: MetadataServer, db):
    url = cimd.document(
        "/client.json",
        {"client_id": cimd.base_url + "/other.json", "client_name": "Impostor", "redirect_uris": [REDIRECT]},
    )
    assert resolve_cimd_application(url, request=None) is None
    assert not Application.objects.exists()


def test_an_unknown_client_gets_the_error_page_and_no_code(cimd: MetadataServer, alice_client):
    url = cimd.raw("/client.json", 404, {"Content-Type": "text/plain"}, b"no")
    response = alice_client.get(authorize_query(url, pkce()[1]))
    assert response.status_code == 400
    assert b"This connection request cannot be used" in response.content
    assert not Grant.objects.exists() and not AgentSession.objects.exists()


def test_a_redirect_uri_the_document_does_not_name_gets_no_code(cimd: MetadataServer, alice_client):
    url = cimd.client_document("/client.json", REDIRECT)
    response = alice_client.get(authorize_query(url, pkce()[1], redirect_uri="https://evil.example/callback"))
    assert response.status_code == 400
    assert "Location" not in response
    assert b"This connection request cannot be used" in response.content


# PKCE and consent -------------------------------------------------------------------------------------


def test_the_customer_signs_in_first(cimd: MetadataServer, db):
    url = cimd.client_document("/client.json", REDIRECT)
    response = Client().get(authorize_query(url, pkce()[1]))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/oauth/authorize/")


def test_the_consent_page_names_the_client_its_host_the_tools_and_the_lifetimes(cimd: MetadataServer, alice_client):
    url = cimd.client_document("/client.json", REDIRECT)
    page = alice_client.get(authorize_query(url, pkce()[1]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "Let Test assistant act for you?" in text
    assert "<strong>127.0.0.1</strong>" in text
    assert "<strong>refund_order</strong>" in text
    assert 'name="csrfmiddlewaretoken"' in text
    for words in ("1 hour", "8 hours", "1 day", "7 days"):
        assert words in text
    assert "<legend>How long the assistant may act for you</legend>" in text
    # The form's answer redirects to the client: its origin, and no other, is a form action.
    assert "form-action 'self' http://127.0.0.1:33418" in page["Content-Security-Policy"]


def test_without_a_code_challenge_there_is_no_code(cimd: MetadataServer, alice_client):
    url = cimd.client_document("/client.json", REDIRECT)
    response = alice_client.get(authorize_query(url, None))
    assert response.status_code == 302
    assert parse_qs(urlsplit(response["Location"]).query)["error"] == ["invalid_request"]
    plain = alice_client.get(authorize_query(url, None, code_challenge="x" * 43, code_challenge_method="plain"))
    assert parse_qs(urlsplit(plain["Location"]).query)["error"] == ["invalid_request"]
    assert not Grant.objects.exists() and not AgentSession.objects.exists()


def test_a_code_without_its_verifier_gets_no_token(cimd: MetadataServer, alice_client):
    url = cimd.client_document("/client.json", REDIRECT)
    verifier, challenge = pkce()
    _page, response = consent(alice_client, url, challenge)
    code = code_from(response)
    missing = token(url, grant_type="authorization_code", code=code, redirect_uri=REDIRECT)
    assert missing.status_code == 400
    wrong = token(url, grant_type="authorization_code", code=code, redirect_uri=REDIRECT, code_verifier="y" * 64)
    assert wrong.status_code == 400
    assert wrong.json()["error"] == "invalid_grant"
    assert not AccessToken.objects.exists()


def test_refusing_consent_grants_nothing(cimd: MetadataServer, alice_client):
    url = cimd.client_document("/client.json", REDIRECT)
    _page, response = consent(alice_client, url, pkce()[1], allow=False)
    assert response.status_code == 302
    query = parse_qs(urlsplit(response["Location"]).query)
    assert query["error"] == ["access_denied"] and query["state"] == ["st4te"]
    assert not AgentSession.objects.exists() and not Grant.objects.exists()


def test_consent_mints_an_agent_session_for_the_customer_with_the_lifetime_picked(
    cimd: MetadataServer, alice, alice_client
):
    url = cimd.client_document("/client.json", REDIRECT)
    before = timezone.now()
    body = tokens_for(alice_client, url, lifetime=28800)
    assert body["token_type"] == "Bearer" and body["expires_in"] == 600
    assert body["refresh_token"]
    session = AgentSession.objects.get()
    assert session.user == alice
    assert "refund_order" in session.tools and session.tools == oauth_tools_for(alice)
    assert session.oauth_application.client_id == url
    assert session.label == "OAuth: Test assistant (127.0.0.1)"
    assert before + timedelta(seconds=28800) <= session.expires_at <= timezone.now() + timedelta(seconds=28800)
    assert session.oauth_token_family == RefreshToken.objects.get().token_family
    created = AuditRecord.objects.get(event=AuditEvent.AGENT_SESSION_CREATED)
    assert created.agent_session_id == session.pk and created.actor_id == alice.pk
    # Stored hashed: the access token's text is nowhere in the database.
    assert not AccessToken.objects.filter(token=body["access_token"]).exists()


def test_a_lifetime_not_on_the_list_is_refused(cimd: MetadataServer, alice_client):
    url = cimd.client_document("/client.json", REDIRECT)
    _page, response = consent(alice_client, url, pkce()[1], lifetime=10**8)
    assert response.status_code == 200
    assert response.context["form"].errors["lifetime"]
    assert not AgentSession.objects.exists()


def test_a_code_is_used_once(cimd: MetadataServer, alice_client):
    url = cimd.client_document("/client.json", REDIRECT)
    verifier, challenge = pkce()
    _page, response = consent(alice_client, url, challenge)
    code = code_from(response)
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "code_verifier": verifier}
    assert token(url, **data).status_code == 200
    assert token(url, **data).status_code == 400


# The token acts as its person --------------------------------------------------------------------------


def test_the_access_token_acts_as_the_customer_and_no_one_else(cimd: MetadataServer, alice, bob, o12, alice_client):
    OrderFactory(number="o-17", customer=bob, currency="EUR", total_minor=1000)
    url = cimd.client_document("/client.json", REDIRECT)
    access = tokens_for(alice_client, url)["access_token"]

    foreign = tool_call(access, order_id="o-17", amount_minor=500, reason="damaged")
    missing = tool_call(access, order_id="o-99", amount_minor=500, reason="damaged")
    assert foreign.status_code == missing.status_code == 422
    assert foreign.json()["error"]["code"] == missing.json()["error"]["code"] == "order_unavailable"
    assert foreign.json()["error"]["message"].replace("o-17", "N") == missing.json()["error"]["message"].replace(
        "o-99", "N"
    )

    mine = tool_call(access, order_id="o-12", amount_minor=500, reason="damaged")
    assert mine.status_code == 201, mine.json()
    preview = Preview.objects.get()
    session = AgentSession.objects.get()
    assert preview.actor == alice and preview.agent_session == session
    proposed = AuditRecord.objects.filter(agent_session=session, event=AuditEvent.PROPOSED)
    assert proposed.count() == 1


def test_refresh_rotates_and_keeps_the_session(cimd: MetadataServer, alice_client, o12):
    url = cimd.client_document("/client.json", REDIRECT)
    first = tokens_for(alice_client, url)
    refreshed = token(url, grant_type="refresh_token", refresh_token=first["refresh_token"])
    assert refreshed.status_code == 200, refreshed.content
    second = refreshed.json()
    assert second["refresh_token"] != first["refresh_token"]
    assert tool_call(first["access_token"], order_id="o-12", amount_minor=1, reason="damaged").status_code == 401
    assert tool_call(second["access_token"], order_id="o-12", amount_minor=1, reason="damaged").status_code == 201
    assert Preview.objects.get().agent_session == AgentSession.objects.get()
    # The old refresh token is spent: replaying it is refused and ends the whole family.
    assert token(url, grant_type="refresh_token", refresh_token=first["refresh_token"]).status_code == 400
    assert tool_call(second["access_token"], order_id="o-12", amount_minor=1, reason="damaged").status_code == 401


def test_revoking_the_token_revokes_the_agent_session(cimd: MetadataServer, alice_client, o12):
    url = cimd.client_document("/client.json", REDIRECT)
    body = tokens_for(alice_client, url)
    response = Client().post("/oauth/revoke_token/", {"client_id": url, "token": body["access_token"]})
    assert response.status_code == 200
    session = AgentSession.objects.get()
    assert session.revoked_at is not None
    revoked = AuditRecord.objects.get(event=AuditEvent.AGENT_SESSION_REVOKED)
    assert revoked.agent_session_id == session.pk and revoked.result["reason"] == "oauth_token_revoked"
    assert tool_call(body["access_token"], order_id="o-12", amount_minor=1, reason="damaged").status_code == 401
    assert token(url, grant_type="refresh_token", refresh_token=body["refresh_token"]).status_code == 400


def test_revoking_the_agent_session_revokes_its_tokens(cimd: MetadataServer, alice_client, o12):
    url = cimd.client_document("/client.json", REDIRECT)
    body = tokens_for(alice_client, url)
    session = AgentSession.objects.get()
    assert agent_sessions_revoke(session_id=session.pk) == 1
    assert not AccessToken.objects.exists()
    assert RefreshToken.objects.get().revoked is not None
    unauthorized = tool_call(body["access_token"], order_id="o-12", amount_minor=1, reason="damaged")
    assert unauthorized.status_code == 401
    assert token(url, grant_type="refresh_token", refresh_token=body["refresh_token"]).status_code == 400


def test_an_expired_session_ends_its_tokens(cimd: MetadataServer, alice_client, o12):
    url = cimd.client_document("/client.json", REDIRECT)
    body = tokens_for(alice_client, url)
    AgentSession.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = tool_call(body["access_token"], order_id="o-12", amount_minor=1, reason="damaged")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "This agent session expired."
    assert token(url, grant_type="refresh_token", refresh_token=body["refresh_token"]).status_code == 400


def test_bearer_agent_tokens_keep_working(alice_agent, o12):
    response = tool_call(alice_agent.token, order_id="o-12", amount_minor=1, reason="damaged")
    assert response.status_code == 201


def test_an_http_redirect_uri_off_loopback_gets_no_code_even_if_the_document_lists_it(
    cimd: MetadataServer, alice_client
):
    plain = "http://assistant.example/callback"
    url = cimd.client_document("/client.json", plain)
    response = alice_client.get(authorize_query(url, pkce()[1], redirect_uri=plain))
    assert response.status_code == 400
    assert "Location" not in response
    assert not AgentSession.objects.exists()


def test_the_code_comes_back_with_the_issuer(cimd: MetadataServer, alice_client):
    url = cimd.client_document("/client.json", REDIRECT)
    _page, response = consent(alice_client, url, pkce()[1])
    assert parse_qs(urlsplit(response["Location"]).query)["iss"] == ["http://testserver"]
    assert (
        Client().get("/.well-known/oauth-authorization-server").json()["authorization_response_iss_parameter_supported"]
        is True
    )


def test_at_the_sessions_cap_the_consent_page_says_so_and_grants_nothing(cimd: MetadataServer, alice_client, settings):
    settings.AGENT_SESSIONS_PER_USER_MAX = 0
    url = cimd.client_document("/client.json", REDIRECT)
    _page, response = consent(alice_client, url, pkce()[1])
    assert response.status_code == 200
    assert "live agent sessions, the most allowed (0)" in response.content.decode()
    assert not AgentSession.objects.exists() and not Grant.objects.exists()
