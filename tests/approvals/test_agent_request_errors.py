"""Issue 37: an agent API request that is not as the API takes it is told exactly what to send: a token
without `Bearer `, no token, a body without the JSON Content-Type."""

import pytest
from rest_framework.test import APIClient

from tests.conftest import agent_client_for


def test_a_token_without_bearer_is_told_what_to_send(alice):
    """Issue 37: `Authorization: agt_…` (no `Bearer `) answered "Authentication credentials were not provided"."""
    agent = agent_client_for(alice)
    for header in (agent.token, f"Token {agent.token}"):
        response = APIClient().get("/api/agent/tools", HTTP_AUTHORIZATION=header)
        assert response.status_code == 401
        error = response.json()["error"]
        assert error["code"] == "authentication_failed"
        assert error["message"].startswith("The Authorization header must start with `Bearer `: send ")
        assert "`Authorization: Bearer agt_…`" in error["message"]


@pytest.mark.django_db
def test_no_token_at_all_is_told_what_to_send():
    response = APIClient().get("/api/agent/tools")
    assert response.status_code == 401
    assert response.json()["error"]["message"].startswith(
        "No agent token: send the header `Authorization: Bearer agt_…`"
    )


@pytest.mark.parametrize(
    ("content_type", "said"),
    [
        ("", "The request has no Content-Type header"),
        ("application/x-www-form-urlencoded", "The body was sent as 'application/x-www-form-urlencoded'"),
    ],
)
def test_a_body_without_the_json_content_type_is_told_what_to_send(alice, content_type, said):
    """curl's -d without -H 'Content-Type: application/json' answered 'Unsupported media type "" in request.'"""
    agent = agent_client_for(alice)
    body = '{"name": "refund_order", "arguments": {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"}}'
    response = agent.generic("POST", "/api/agent/tool-calls", body, content_type=content_type)
    assert response.status_code == 415
    assert response.json()["error"] == {
        "code": "unsupported_media_type",
        "message": f"{said}: send it as JSON with `Content-Type: application/json`.",
    }
