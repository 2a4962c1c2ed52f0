"""Issue 37: the agent examples (docs/agents.md, the Python client's README) each have an order of their own
in the demo shop, so after the README's walk-through has used up o-12 every example is still a preview, not
`amount_exceeds_remaining`."""

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, Preview
from tests.conftest import agent_client_for, propose

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = [ROOT / "docs" / "agents.md", ROOT / "clients" / "python" / "README.md"]
ORDER = re.compile(r"\b(o-\d+|ORD-\d+)\b")


def example_orders() -> list[str]:
    """The order each Python example refunds, in the order they appear."""
    orders = []
    for path in EXAMPLES:
        for block in re.findall(r"```python\n(.*?)```", path.read_text(), re.S):
            orders += ORDER.findall(block)
    return orders


def test_each_example_has_an_order_of_its_own_that_the_walk_through_leaves_alone():
    orders = example_orders()
    # Claude, the asyncio client, the OpenAI Agents SDK, the Claude Agent SDK, LangChain, an MCP client, the
    # client's README
    assert len(orders) == 7, orders
    assert len(set(orders)) == len(orders)
    assert not set(orders) & {"o-12", "o-17", "ORD-4417"}  # the README's walk-through and the seeds
    shop = {o["id"]: o for o in json.loads((ROOT / "demo" / "shop.json").read_text())["orders"]}
    for number in orders:
        order = shop[number]
        assert (order["customer"], order["currency"], order["status"]) == ("alice", "EUR", "delivered"), number
        assert order["total_minor"] - order["refunded_minor"] >= 500, number


@pytest.mark.django_db
def test_after_the_walk_through_every_example_is_a_preview(settings, django_capture_on_commit_callbacks):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 10000, "USD": 10000, "JPY": 15000}
    call_command("seed_demo", "--no-token", "--operator", "tester", stdout=StringIO())
    alice = get_user_model().objects.get(username="alice")
    agent = agent_client_for(alice)
    # The walk-through refunds five euros of o-12 (step 5), and five more with a staff review (step 7).
    for _step in (5, 7):
        answer = propose(agent, order_id="o-12", amount_minor=500, reason="damaged")
        walk = Preview.objects.get(pk=answer.json()["preview"]["id"])
        with django_capture_on_commit_callbacks(execute=True):
            preview_approve(preview_id=walk.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=walk.digest)
    refused = propose(agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert refused.json()["error"]["code"] == "amount_exceeds_remaining"  # what the examples answered before

    for number in example_orders():
        response = propose(agent, order_id=number, amount_minor=500, reason="damaged")
        assert response.status_code == 201, (number, response.json())
        assert response.json()["status"] == "awaiting_customer"
    assert Preview.objects.filter(subject_id__in=example_orders()).count() == 7
