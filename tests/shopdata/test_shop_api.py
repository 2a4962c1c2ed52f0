"""The shop data API (docs/shop-data.md): tokens, each answer with its body, the stored records and the
audit log. The concurrent PUT and confirmation on PostgreSQL is in test_shop_api_concurrency.py."""

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from approvals.core.digests import sha256_hex
from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, AuditRecord, Preview, ShopIdempotencyKey, ShopToken
from approvals.site.shop_import import ShopDataInvalid, shop_data_validate
from approvals.site.shopdata.tokens import shop_token_create
from invoices.models import Invoice
from refunds.models import Order
from tests.conftest import give_up_execution, propose
from tests.factories import StaffFactory, UserFactory

ALL = ["orders:write", "invoices:write", "customers:write"]
ORDER = {
    "id": "o-88",
    "customer": "alice",
    "currency": "EUR",
    "total_minor": 4990,
    "refunded_minor": 0,
    "status": "delivered",
    "placed_at": "2026-11-02",
    "delivered_at": "2026-11-05",
    "payment_ref": "pi_o-88",
}


def shop_client(scopes=ALL, label="shop-backend"):
    _, token = shop_token_create(scopes=list(scopes), label=label)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    client.token = token
    return client


def put(client, path, body, **headers):
    return client.put(path, json.dumps(body), content_type="application/json", headers=headers)


@pytest.fixture
def shop(alice):
    return shop_client()


def audits(event, subject_id=None):
    records = AuditRecord.objects.filter(event=event).order_by("id")
    if subject_id is not None:
        records = records.filter(subject_id=subject_id)
    return list(records.values_list("result", flat=True))


# Tokens -------------------------------------------------------------------------------------------


def test_create_shop_token_prints_the_token_alone_on_its_last_line_and_stores_only_its_hash(db):
    out = io.StringIO()
    call_command(
        "create_shop_token", "--scopes", "orders:write,invoices:write,customers:write", "--label", "erp", stdout=out
    )

    token = out.getvalue().splitlines()[-1]
    assert token.startswith("shp_") and len(token) > 40
    stored = ShopToken.objects.get()
    assert (stored.label, stored.scopes) == ("erp", ["customers:write", "invoices:write", "orders:write"])
    assert stored.token_hash == sha256_hex(token)
    assert stored.token_prefix == token[:12]
    assert token not in json.dumps(list(ShopToken.objects.values()), default=str)
    [created] = audits("shop_token_created")
    assert created == {
        "operator": "erp",
        "token_prefix": token[:12],
        "scopes": ["customers:write", "invoices:write", "orders:write"],
    }
    # It works: a read needs the section's scope only.
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/shop/orders/o-nothing").status_code == 404


def test_create_shop_token_refuses_an_unknown_scope(db):
    with pytest.raises(CommandError, match="Unknown scope refunds:write"):
        call_command("create_shop_token", "--scopes", "orders:write,refunds:write", stdout=io.StringIO())
    assert ShopToken.objects.count() == 0


def test_a_revoked_token_gets_a_401_and_the_revocation_is_audited(alice, shop):
    assert put(shop, "/api/shop/orders/o-88", ORDER).status_code == 201
    stored = ShopToken.objects.get()
    call_command("revoke_shop_token", "--token-prefix", shop.token[:12], stdout=io.StringIO())

    response = put(shop, "/api/shop/orders/o-88", {**ORDER, "total_minor": 1})

    assert response.status_code == 401
    assert response.json()["error"] == {"code": "authentication_failed", "message": "This shop token was revoked."}
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="shop"'
    assert Order.objects.get(number="o-88").total_minor == 4990
    assert audits("shop_token_revoked") == [{"operator": "shop-backend", "token_prefix": stored.token_prefix}]


@pytest.mark.parametrize(
    ("header", "code", "message"),
    [
        (None, "not_authenticated", "Authentication credentials were not provided."),
        ("Bearer shp_not-a-token", "authentication_failed", "Invalid shop token."),
        ("Bearer", "authentication_failed", "Send the header as `Authorization: Bearer shp_…`."),
    ],
)
def test_no_or_a_bad_token_is_a_401(alice, header, code, message):
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = put(client, "/api/shop/orders/o-88", ORDER)
    assert response.status_code == 401
    assert response.json() == {"ok": False, "executed": False, "error": {"code": code, "message": message}}
    assert not Order.objects.filter(number="o-88").exists()


def test_an_agent_token_is_not_a_shop_token(alice, alice_agent):
    response = alice_agent.get("/api/shop/orders/o-12")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Invalid shop token."


# Scopes ---------------------------------------------------------------------------------------------


def test_a_token_without_the_scope_is_a_403_and_changes_nothing(alice, o12):
    customers_only = shop_client(["customers:write"], label="crm")

    response = put(customers_only, "/api/shop/orders/o-12", {**ORDER, "id": "o-12", "total_minor": 5})
    read = customers_only.get("/api/shop/orders/o-12")

    assert response.status_code == 403
    assert response.json()["error"] == {
        "code": "permission_denied",
        "message": "This token may not write orders: it needs orders:write.",
        "needed_scope": "orders:write",
        "token_scopes": ["customers:write"],
    }
    assert read.status_code == 403
    assert read.json()["error"]["needed_scope"] == "orders:read"
    o12.refresh_from_db()
    assert (o12.total_minor, o12.version) == (1000, 1)
    refused = audits("shop_api_call", "o-12")
    assert [(r["operator"], r["method"], r["status"], r["code"]) for r in refused] == [
        ("crm", "PUT", 403, "permission_denied"),
        ("crm", "GET", 403, "permission_denied"),
    ]


def test_a_read_scope_reads_and_may_not_write(alice, o12):
    reader = shop_client(["orders:read"])
    assert reader.get("/api/shop/orders/o-12").status_code == 200
    response = put(reader, "/api/shop/orders/o-12", {**ORDER, "id": "o-12"})
    assert response.status_code == 403
    assert response.json()["error"]["needed_scope"] == "orders:write"
    o12.refresh_from_db()
    assert (o12.total_minor, o12.version) == (1000, 1)  # nothing written


# Orders -----------------------------------------------------------------------------------------------


def test_put_creates_then_changes_then_leaves_an_order_unchanged(alice, shop):
    created = put(shop, "/api/shop/orders/o-88", ORDER)
    assert created.status_code == 201
    assert created.json() == {"ok": True, "outcome": "created", "record": ORDER, "version": 1}

    changed = put(shop, "/api/shop/orders/o-88", {**ORDER, "status": "cancelled", "delivered_at": None})
    assert changed.status_code == 200
    assert changed.json() == {
        "ok": True,
        "outcome": "updated",
        "record": {**ORDER, "status": "cancelled", "delivered_at": None},
        "version": 2,
    }

    body = {k: v for k, v in ORDER.items() if k != "id"}  # the path names it
    unchanged = put(shop, "/api/shop/orders/o-88", {**body, "status": "cancelled", "delivered_at": None})
    assert unchanged.status_code == 200
    assert (unchanged.json()["outcome"], unchanged.json()["version"]) == ("unchanged", 2)

    order = Order.objects.get(number="o-88")
    assert (order.status, order.delivered_at, order.version, order.customer.username) == ("cancelled", None, 2, "alice")
    changes = audits("shop_data_changed", "o-88")
    assert [(c["source"], c["operator"], c["outcome"], c["token_prefix"]) for c in changes] == [
        ("shop_api", "shop-backend", "created", shop.token[:12]),
        ("shop_api", "shop-backend", "updated", shop.token[:12]),
    ]
    assert changes[1]["changed"] == ["delivered_at", "status", "version"]
    assert [(c["outcome"], c["status"]) for c in audits("shop_api_call", "o-88")] == [("unchanged", 200)]


def test_get_answers_the_order_in_the_import_format_with_its_version(alice, shop):
    put(shop, "/api/shop/orders/o-88", ORDER)
    response = shop.get("/api/shop/orders/o-88")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "record": ORDER, "version": 1}
    # What GET answers is a valid import item: the file the import takes.
    assert shop_data_validate(json.dumps({"orders": [response.json()["record"]]}))

    missing = shop.get("/api/shop/orders/o-404")
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "code": "not_found",
        "message": "There is no orders record 'o-404'.",
        "record": None,
    }


def test_a_bad_record_is_a_400_with_the_imports_messages_at_json_paths_of_the_body(alice, shop):
    bad = {**ORDER, "currency": "EURO", "total_minor": -1, "placed_at": "yesterday"}
    response = put(shop, "/api/shop/orders/o-88", bad)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_record"
    with pytest.raises(ShopDataInvalid) as imported:
        shop_data_validate(json.dumps({"orders": [bad]}))
    assert imported.value.problems  # the same problems, at the body's paths instead of the file's
    assert error["problems"] == [p.replace("$.orders[0]", "$", 1) for p in imported.value.problems]
    assert "$.currency: Ensure this field has no more than 3 characters." in error["problems"]
    assert any(p.startswith("$.total_minor: ") for p in error["problems"])
    assert any(p.startswith("$.placed_at: ") for p in error["problems"])
    assert error["message"] == "; ".join(error["problems"])
    assert not Order.objects.filter(number="o-88").exists()


def test_the_id_in_the_path_must_match_the_records(alice, shop):
    response = put(shop, "/api/shop/orders/o-88", {**ORDER, "id": "o-99"})
    assert response.status_code == 400
    assert response.json()["error"]["problems"] == ["$.id: must be 'o-88', the id in the path, or be left out"]
    assert Order.objects.count() == 0


def test_an_unknown_field_and_an_unknown_customer_are_refused_like_the_import(alice, shop):
    unknown_field = put(shop, "/api/shop/orders/o-88", {**ORDER, "colour": "red"})
    assert unknown_field.status_code == 400
    assert unknown_field.json()["error"]["problems"] == ["$.colour: This field is not allowed."]
    unknown_customer = put(shop, "/api/shop/orders/o-88", {**ORDER, "customer": "nobody"})
    assert unknown_customer.status_code == 400
    assert unknown_customer.json()["error"]["problems"] == [
        "$.customer: No customer 'nobody' in the file or the database."
    ]


# If-Match ---------------------------------------------------------------------------------------------


def test_if_match_writes_only_over_the_named_version(alice, shop):
    put(shop, "/api/shop/orders/o-88", ORDER)
    put(shop, "/api/shop/orders/o-88", {**ORDER, "total_minor": 5000})  # version 2

    stale = put(shop, "/api/shop/orders/o-88", {**ORDER, "total_minor": 6000}, **{"If-Match": "1"})
    assert stale.status_code == 409
    assert stale.json()["error"] == {
        "code": "version_mismatch",
        "message": "If-Match names version '1', but the orders record 'o-88' is at version 2 now. "
        "Read it again (GET), then send your change with its current version.",
        "current_version": 2,
    }
    assert Order.objects.get(number="o-88").total_minor == 5000

    fresh = put(shop, "/api/shop/orders/o-88", {**ORDER, "total_minor": 6000}, **{"If-Match": '"2"'})
    assert fresh.status_code == 200
    assert (fresh.json()["record"]["total_minor"], fresh.json()["version"]) == (6000, 3)

    absent = put(shop, "/api/shop/orders/o-new", {**ORDER, "id": "o-new"}, **{"If-Match": "1"})
    assert absent.status_code == 409
    assert absent.json()["error"]["current_version"] is None
    assert not Order.objects.filter(number="o-new").exists()


# Idempotency-Key --------------------------------------------------------------------------------------


def test_the_same_key_and_body_get_the_stored_answer_and_write_once(alice, shop):
    first = put(shop, "/api/shop/orders/o-88", ORDER, **{"Idempotency-Key": "sync-1"})
    # Meanwhile the order changes; the retry of the first request is still answered as the first was.
    put(shop, "/api/shop/orders/o-88", {**ORDER, "total_minor": 5000})
    again = put(shop, "/api/shop/orders/o-88", ORDER, **{"Idempotency-Key": "sync-1"})

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() == {"ok": True, "outcome": "created", "record": ORDER, "version": 1}
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    order = Order.objects.get(number="o-88")
    assert (order.total_minor, order.version) == (5000, 2)  # the replay wrote nothing
    assert [(c["replayed"], c["status"]) for c in audits("shop_api_call", "o-88")] == [(True, 201)]


def test_the_same_key_with_another_body_is_a_409_and_writes_nothing(alice, shop):
    put(shop, "/api/shop/orders/o-88", ORDER, **{"Idempotency-Key": "sync-2"})
    other = put(shop, "/api/shop/orders/o-88", {**ORDER, "total_minor": 1}, **{"Idempotency-Key": "sync-2"})
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert "'sync-2' was used for another request" in other.json()["error"]["message"]
    assert Order.objects.get(number="o-88").total_minor == 4990


def test_a_refused_write_keeps_no_key_and_a_bad_key_is_a_400(alice, shop):
    refused = put(shop, "/api/shop/orders/o-88", {**ORDER, "currency": "XXX1"}, **{"Idempotency-Key": "k"})
    assert refused.status_code == 400
    assert ShopIdempotencyKey.objects.count() == 0
    assert put(shop, "/api/shop/orders/o-88", ORDER, **{"Idempotency-Key": "k"}).status_code == 201

    bad = put(shop, "/api/shop/orders/o-88", ORDER, **{"Idempotency-Key": "has space"})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_idempotency_key"


def test_keys_are_per_token(alice):
    one, two = shop_client(label="one"), shop_client(label="two")
    assert put(one, "/api/shop/orders/o-88", ORDER, **{"Idempotency-Key": "k"}).status_code == 201
    other = put(two, "/api/shop/orders/o-88", {**ORDER, "total_minor": 10}, **{"Idempotency-Key": "k"})
    assert (other.status_code, other.json()["outcome"]) == (200, "updated")


# A refund in flight -----------------------------------------------------------------------------------


def test_a_change_that_leaves_no_room_for_a_refund_in_flight_is_refused(
    alice, o12, alice_agent, shop, django_capture_on_commit_callbacks
):
    response = propose(alice_agent, order_id="o-12", amount_minor=800, reason="damaged")
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    with django_capture_on_commit_callbacks():  # confirmed; its execution is not run here
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    give_up_execution(preview, effect_possible=True)  # the refund may be at the provider: in flight

    lowered = {**ORDER, "id": "o-12", "total_minor": 500, "payment_ref": "pi_o-12"}
    response = put(shop, "/api/shop/orders/o-12", lowered)

    assert response.status_code == 400
    assert response.json()["error"]["problems"] == [
        "$.refunded_minor: 0 plus the 800 being refunded right now exceeds the total of 500; "
        "wait until those refunds are recorded."
    ]
    o12.refresh_from_db()
    assert (o12.total_minor, o12.version) == (1000, 1)


# Invoices and customers ---------------------------------------------------------------------------------

INVOICE = {
    "number": "INV-9",
    "customer": "alice",
    "currency": "EUR",
    "status": "issued",
    "contacts": ["billing@example.test"],
    "lines": [{"description": "Consulting", "quantity": 2, "unit_minor": 6000}],
}


def test_invoices_are_put_and_read_in_the_import_format(alice, shop):
    created = put(shop, "/api/shop/invoices/INV-9", INVOICE)
    assert created.status_code == 201
    assert created.json() == {"ok": True, "outcome": "created", "record": INVOICE, "version": 1}
    changed = put(shop, "/api/shop/invoices/INV-9", {**INVOICE, "lines": [{**INVOICE["lines"][0], "quantity": 3}]})
    assert (changed.status_code, changed.json()["version"]) == (200, 2)
    assert Invoice.objects.get(number="INV-9").total_minor == 18000
    assert shop.get("/api/shop/invoices/INV-9").json()["record"]["lines"][0]["quantity"] == 3
    bad = put(
        shop, "/api/shop/invoices/INV-9", {**INVOICE, "lines": [{"description": "x", "quantity": 0, "unit_minor": 1}]}
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["problems"] == ["$.lines[0].quantity: Ensure this value is greater than or equal to 1."]


def test_customers_have_a_digest_version_that_follows_every_change(db):
    shop = shop_client(["customers:write"])
    created = put(shop, "/api/shop/customers/carol", {"email": "carol@example.test"})
    assert created.status_code == 201
    body = created.json()
    assert body["record"] == {"username": "carol", "email": "carol@example.test"}
    assert isinstance(body["version"], str) and len(body["version"]) == 16

    same = put(shop, "/api/shop/customers/carol", {"username": "carol", "email": "carol@example.test"})
    assert (same.json()["outcome"], same.json()["version"]) == ("unchanged", body["version"])

    # A change made elsewhere (the admin, the import) gives a new version too: If-Match catches it.
    get_user_model().objects.filter(username="carol").update(email="c@example.test")
    stale = put(shop, "/api/shop/customers/carol", {"email": "x@example.test"}, **{"If-Match": body["version"]})
    assert stale.status_code == 409
    current = stale.json()["error"]["current_version"]
    assert current != body["version"]
    assert shop.get("/api/shop/customers/carol").json() == {
        "ok": True,
        "record": {"username": "carol", "email": "c@example.test"},
        "version": current,
    }
    password = put(shop, "/api/shop/customers/carol", {"email": "c@example.test", "password": "s3cret-pass"})
    assert password.json()["outcome"] == "updated" and password.json()["version"] != current
    assert "password" not in password.json()["record"]
    assert get_user_model().objects.get(username="carol").check_password("s3cret-pass")


def test_a_staff_members_username_is_not_served(db):
    StaffFactory(username="sam")
    shop = shop_client(["customers:write"])
    response = put(shop, "/api/shop/customers/sam", {"email": "evil@example.test", "password": "taken-over"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "staff_account"
    sam = get_user_model().objects.get(username="sam")
    assert sam.is_staff and not sam.check_password("taken-over")
    assert shop.get("/api/shop/customers/sam").status_code == 409


# Throttle and the console -------------------------------------------------------------------------------


def test_calls_past_the_tokens_rate_are_a_429_with_retry_after(alice, shop, settings):
    settings.SHOP_THROTTLE_RATE = "2/min"
    assert [shop.get("/api/shop/orders/o-1").status_code for _ in range(2)] == [404, 404]
    throttled = shop.get("/api/shop/orders/o-1")
    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "throttled"
    assert int(throttled.headers["Retry-After"]) >= 1


def test_staff_with_the_permission_list_and_revoke_tokens_in_the_console(client, db):
    shop = shop_client(label="erp")
    token = ShopToken.objects.get()
    manager = StaffFactory()
    manager.user_permissions.add(Permission.objects.get(codename="manage_shop_tokens"))
    client.force_login(manager)

    page = client.get("/console/shop-tokens/")
    assert page.status_code == 200
    assert f"{token.token_prefix}…" in page.content.decode() and "erp" in page.content.decode()
    assert shop.token not in page.content.decode()

    revoked = client.post(f"/console/shop-tokens/{token.pk}/revoke")
    assert revoked.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert audits("shop_token_revoked")[0]["operator"] == "erp"
    assert AuditRecord.objects.get(event="shop_token_revoked").actor == manager
    assert shop.get("/api/shop/orders/o-1").status_code == 401


def test_staff_without_the_permission_get_a_403(client, db):
    shop_client()
    token = ShopToken.objects.get()
    client.force_login(StaffFactory())
    assert client.get("/console/shop-tokens/").status_code == 403
    assert client.post(f"/console/shop-tokens/{token.pk}/revoke").status_code == 403
    client.force_login(UserFactory())
    assert client.get("/console/shop-tokens/").status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None
