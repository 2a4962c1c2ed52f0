"""The detail page separates verified facts from what the agent supplied."""

import re

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole
from refunds.models import Refund
from tests.conftest import agent_client_for

from .conftest import bulk_previews, confirmed, proposed
from .test_queue import text


def section(html: str, heading_id: str) -> str:
    match = re.search(rf'<section[^>]*aria-labelledby="{heading_id}".*?</section>', html, re.S)
    assert match, heading_id
    return text(match.group(0))


def test_verified_facts_come_from_the_database(
    big_order, reviewer_client, second_reviewer, django_capture_on_commit_callbacks
):
    earlier = confirmed(proposed(big_order.customer, "o-77", 20000, reason="unwanted"))
    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=earlier.pk, approver=second_reviewer, role=ApprovalRole.STAFF, digest=earlier.digest)
    assert Refund.objects.count() == 1
    preview = confirmed(proposed(big_order.customer, "o-77", 12000))

    html = reviewer_client.get(f"/console/previews/{preview.pk}/").content.decode()
    verified = section(html, "verified-title")
    for fact in (
        "Verified Facts from the shop's database",
        "Customer alice (alice@example.test)",
        "Order status Delivered",
        "Delivery took 2 days",
        "Order total €500.00",
        "Already refunded €200.00",
        "Remaining refundable €300.00",
        "Remaining after this refund €180.00",
        "1. Order belongs to the customer ✓ Passes",
        "4. Amount is within what remains refundable ✓ Passes Amount 12000 against 30000 remaining",
        "Order unchanged since the preview ✓ Passes",
        "Refunds already made on o-77 (ledger)",
        "€200.00 No longer wanted",
        "Refund €200.00 on o-77 for customer “alice”, unwanted Completed",
    ):
        assert fact in verified, fact
    assert Refund.objects.get().gateway_refund_id in verified


def test_the_agent_supplied_call_is_shown_exactly_and_labelled_unverified(big_order, reviewer_client):
    agent = agent_client_for(big_order.customer, label="support chat #4711")
    raw = '{"order_id": "o-77",   "amount_minor": 12000, "reason": "damaged"}'
    response = agent.post("/api/agent/tool-calls", {"name": "refund_order", "arguments": raw}, format="json")
    assert response.status_code == 201
    preview = confirmed(_preview(response))

    html = reviewer_client.get(f"/console/previews/{preview.pk}/").content.decode()
    unverified = re.search(r'<section[^>]*aria-labelledby="unverified-title".*?</section>', html, re.S).group(0)
    assert "Unverified" in unverified and "proves nothing" in unverified
    assert f'<pre class="raw" aria-labelledby="raw-call-title">{raw.replace(chr(34), "&quot;")}</pre>' in unverified
    assert "support chat #4711" in unverified
    assert agent.agent_session.token_prefix in unverified
    # The agent's words never appear among the verified facts.
    assert "support chat #4711" not in section(html, "verified-title")


def _preview(response):
    from approvals.models import Preview

    return Preview.objects.get(pk=response.json()["preview"]["id"])


def test_a_preview_without_an_agent_proposal_says_so(big_order, reviewer_client):
    preview = bulk_previews(1, customer=big_order.customer, order_number="o-77")[0]
    html = reviewer_client.get(f"/console/previews/{preview.pk}/").content.decode()
    assert "No agent proposal is recorded" in section(html, "unverified-title")
