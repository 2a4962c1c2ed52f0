import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from approvals.core.registry import registry
from approvals.core.services import agent_token_hash
from approvals.models import AgentSession, AuditRecord
from invoices.models import Invoice, StandingApproval
from refunds.models import Order
from tests.conftest import agent_client_for

SHOP = {
    "customers": [{"username": "alice", "email": "alice@example.test", "password": "alice-pass-1"}],
    "staff": [
        {
            "username": "sam",
            "email": "sam@example.test",
            "password": "sam-pass-1",
            "groups": ["Refund reviewers", "Invoice approvers"],
        }
    ],
    "orders": [
        {
            "id": "o-12",
            "customer": "alice",
            "currency": "EUR",
            "total_minor": 1000,
            "refunded_minor": 0,
            "status": "delivered",
            "placed_at": "2026-08-02",
            "delivered_at": "2026-08-04",
            "payment_ref": "pi_o12",
        }
    ],
    "invoices": [
        {
            "number": "INV-17",
            "customer": "alice",
            "currency": "EUR",
            "status": "issued",
            "contacts": ["billing@example.test"],
            "lines": [{"description": "Consulting", "quantity": 1, "unit_minor": 12000}],
        }
    ],
    "standing_approvals": [{"invoice": "INV-17", "recipient": "billing@example.test", "approved_by": "sam"}],
}


def _import(tmp_path, document):
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    out, err = StringIO(), StringIO()
    call_command("import_shop_data", str(path), "--operator", "ops-tester", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_import_creates_everything_and_reimport_is_an_upsert(db, tmp_path):
    out, _ = _import(tmp_path, SHOP)
    assert "orders: 1 created" in out
    order = Order.objects.get(number="o-12")
    assert (order.customer.username, order.currency, order.total_minor, order.version) == ("alice", "EUR", 1000, 1)
    sam = get_user_model().objects.get(username="sam")
    assert sam.is_staff and sam.check_password("sam-pass-1")
    assert set(sam.groups.values_list("name", flat=True)) == {"Refund reviewers", "Invoice approvers"}
    invoice = Invoice.objects.get(number="INV-17")
    assert invoice.total_minor == 12000
    assert list(invoice.contacts.values_list("email", flat=True)) == ["billing@example.test"]
    assert StandingApproval.objects.get().recipient == "billing@example.test"

    out, _ = _import(tmp_path, SHOP)
    assert "orders: 1 unchanged" in out
    assert Order.objects.get(number="o-12").version == 1
    assert StandingApproval.objects.count() == 1

    changed = json.loads(json.dumps(SHOP))
    changed["orders"][0]["status"] = "cancelled"
    changed["invoices"][0]["lines"][0]["unit_minor"] = 15000
    out, _ = _import(tmp_path, changed)
    assert "orders: 1 updated" in out
    order.refresh_from_db()
    assert (order.status, order.version) == ("cancelled", 2)
    invoice.refresh_from_db()
    assert (invoice.total_minor, invoice.version) == (15000, 2)
    assert Order.objects.count() == 1


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.update(products=[]), "$.products: unknown key"),
        (lambda d: d["orders"][0].update(currency="EURO"), "$.orders[0].currency"),
        (lambda d: d["orders"][0].update(currency="XYZ"), "$.orders[0].currency: 'XYZ' is not an ISO 4217"),
        (lambda d: d["orders"][0].update(total_minor=10.5), "$.orders[0].total_minor"),
        (lambda d: d["orders"][0].update(refunded_minor=2000), "$.orders[0].refunded_minor"),
        (lambda d: d["orders"][0].update(customer="mallory"), "$.orders[0].customer: No customer 'mallory'"),
        (lambda d: d["orders"][0].update(colour="red"), "$.orders[0].colour: This field is not allowed."),
        (lambda d: d["orders"][0].update(delivered_at=None), "$.orders[0].delivered_at"),
        (lambda d: d["invoices"][0]["lines"][0].update(quantity=0), "$.invoices[0].lines[0].quantity"),
        (lambda d: d["invoices"][0].update(contacts=["not-an-address"]), "$.invoices[0].contacts[0]"),
        (lambda d: d["standing_approvals"][0].update(approved_by="alice"), "$.standing_approvals[0].approved_by"),
        (lambda d: d["orders"].append(dict(d["orders"][0])), "$.orders: 'o-12' appears more than once"),
    ],
)
def test_bad_values_are_reported_with_their_json_path_and_nothing_is_written(db, tmp_path, mutate, expected):
    document = json.loads(json.dumps(SHOP))
    mutate(document)
    with pytest.raises(CommandError, match="nothing was written"):
        path = tmp_path / "shop.json"
        path.write_text(json.dumps(document))
        err = StringIO()
        try:
            call_command("import_shop_data", str(path), "--operator", "ops-tester", stdout=StringIO(), stderr=err)
        finally:
            assert expected in err.getvalue(), err.getvalue()
    assert not Order.objects.exists()
    assert not get_user_model().objects.filter(username="alice").exists()
    assert not Invoice.objects.exists()


def test_malformed_json_is_refused(db, tmp_path):
    for text in ('{"customers": [', '{"customers": [], "customers": []}', "[1, 2]"):
        with pytest.raises(CommandError):
            _import(tmp_path, text)
    assert not get_user_model().objects.exists()


def test_create_agent_session_prints_the_token_alone_on_its_last_line_and_stores_only_its_hash(db, tmp_path):
    _import(tmp_path, SHOP)
    out = StringIO()
    call_command("create_agent_session", "--user", "alice", "--tools", "refund_order", "--ttl", "600", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    assert token.startswith("agt_") and " " not in token
    session = AgentSession.objects.get()
    assert session.token_hash == agent_token_hash(token) != token
    assert session.tools == ["refund_order"]
    assert 590 <= (session.expires_at - session.created_at).total_seconds() <= 610
    assert AuditRecord.objects.filter(event="agent_session_created", agent_session=session).exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user", "nobody", "--tools", "refund_order"], "No user named 'nobody'"),
        (["--user", "alice", "--tools", "delete_customer"], "Unknown tool 'delete_customer'"),
        (["--user", "alice", "--tools", "refund_order", "--ttl", "0"], "positive number of seconds"),
    ],
)
def test_create_agent_session_refuses_bad_input(db, tmp_path, args, message):
    _import(tmp_path, SHOP)
    with pytest.raises(CommandError, match=message):
        call_command("create_agent_session", *args, stdout=StringIO())
    assert not AgentSession.objects.exists()


def test_seed_demo_loads_the_seed_documents_shop_and_mints_a_working_token(db, client):
    out = StringIO()
    call_command("seed_demo", "--operator", "ops-tester", stdout=out)
    call_command("seed_demo", "--no-token", "--operator", "ops-tester", stdout=StringIO())  # idempotent
    orders = {o.number: (o.customer.username, o.currency, o.total_minor) for o in Order.objects.all()}
    assert orders["o-12"] == ("alice", "EUR", 1000)
    assert orders["o-17"] == ("bob", "USD", 1000)
    assert orders["ORD-4417"] == ("alice", "EUR", 2499)
    assert Invoice.objects.get(number="INV-17").contacts.get().email == "billing@example.test"
    token = out.getvalue().strip().splitlines()[-1]
    response = client.get("/api/agent/tools", headers={"Authorization": f"Bearer {token}"})
    listed = [tool["name"] for tool in response.json()["tools"]]
    # Every installed tool alice may use: the shop's two and those of any other action app.
    alice = get_user_model().objects.get(username="alice")
    assert sorted(listed) == sorted(name for name, action in registry.actions.items() if action.may_use(alice))
    assert {"refund_order", "send_invoice"} <= set(listed)


def test_seed_demo_runs_again_after_the_demo_was_used_and_mints_one_live_token(db, django_capture_on_commit_callbacks):
    """`make run` twice: the second seeding keeps the refund made in between (re-importing o-12 as
    unrefunded would contradict the ledger) and mints a fresh token, revoking the previous one."""
    from approvals.core.services import preview_execute
    from tests.approvals.test_preview_execute import approve_held, make_preview

    first = StringIO()
    call_command("seed_demo", "--operator", "ops", stdout=first)
    alice = get_user_model().objects.get(username="alice")
    preview = make_preview(agent_client_for(alice), order_id="o-12", amount_minor=500)
    approve_held(preview, alice, django_capture_on_commit_callbacks)
    preview_execute(preview_id=preview.pk)

    second = StringIO()
    call_command("seed_demo", "--operator", "ops", stdout=second)

    assert "already loaded" in second.getvalue()
    token = second.getvalue().strip().splitlines()[-1]
    assert token.startswith("agt_") and token != first.getvalue().strip().splitlines()[-1]
    assert Order.objects.get(number="o-12").refunded_minor == 500
    live = AgentSession.objects.filter(user=alice, label="demo", revoked_at__isnull=True)
    assert live.count() == 1
    with pytest.raises(CommandError):
        call_command("seed_demo", "--operator", "ops", "--reload", stdout=StringIO())  # the ledger says 500
