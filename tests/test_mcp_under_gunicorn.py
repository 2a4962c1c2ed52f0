"""/mcp as production serves it: `gunicorn -c config/gunicorn.conf.py config.wsgi:application` (sync workers,
the app preloaded before the fork), the REST API and MCP on the same port, driven by the official client."""

import asyncio
import os
import subprocess
import sys

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from approvals.core.services import agent_session_create
from approvals.models import AuditEvent, AuditRecord, Preview
from tests import workers
from tests.factories import OrderFactory, UserFactory
from tests.workers import ROOT, free_port, stop, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_mcp_and_rest_on_the_same_gunicorn_port():
    alice = UserFactory(username="alice")
    OrderFactory(number="o-12", customer=alice, currency="EUR", total_minor=1000)
    OrderFactory(number="ORD-4417", customer=alice, currency="EUR", total_minor=2499)
    _session, token = agent_session_create(user=alice, tools=["refund_order"])
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": workers.test_database_url(),
        "SECRET_KEY": "test-only-secret-key-not-for-any-deployment-0123456789",
        "REDIS_URL": "",
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "2",
        "CELERY_TASK_ALWAYS_EAGER": "true",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def up():
            try:
                return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        assert wait_for(up, timeout=60), stop(server)
        rest = httpx.get(f"{base}/api/agent/tools?format=mcp", headers={"Authorization": f"Bearer {token}"})
        assert rest.status_code == 200

        async def session():
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with http, Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                listed = await client.list_tools()
                # Several calls, so that both workers (each opening the SDK after the fork) answer some.
                results = [
                    await client.call_tool(
                        "refund_order", {"order_id": "ORD-4417", "amount_minor": 24990 + n, "reason": "damaged"}
                    )
                    for n in range(6)
                ]
                created = await client.call_tool(
                    "refund_order",
                    {"order_id": "o-12", "amount_minor": 500, "reason": "damaged"},
                    meta={"call_id": "g-1"},
                )
                return client.protocol_version, listed, results, created

        version, listed, refusals, created = asyncio.run(session())
    finally:
        output = stop(server)
    assert version == "2026-07-28", output
    # /mcp lists the session's tools in the mcp format, then withdraw_preview (which POST /tool-calls can't run).
    session_tools = [tool for tool in listed.tools if tool.name != "withdraw_preview"]
    assert [tool.name for tool in listed.tools] == [tool.name for tool in session_tools] + ["withdraw_preview"]
    assert [tool["name"] for tool in rest.json()["tools"]] == [tool.name for tool in session_tools]
    assert [tool["inputSchema"] for tool in rest.json()["tools"]] == [tool.input_schema for tool in session_tools]
    for result in refusals:
        assert result.is_error and result.structured_content["error"]["code"] == "amount_exceeds_remaining"
        assert result.structured_content["error"]["remaining_minor"] == 2499
    assert created.structured_content["status"] == "awaiting_customer"
    assert created.structured_content["call_id"] == "g-1"
    preview = Preview.objects.get()
    assert created.structured_content["preview"]["confirm_url"] == f"{base}/previews/{preview.pk}/"
    assert AuditRecord.objects.filter(event=AuditEvent.PROPOSAL_REFUSED).count() == 6
    assert "Traceback" not in output, output
