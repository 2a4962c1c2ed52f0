"""Issue 16, items 5 and 7: every change the back office makes is audited with its operator; subject
ids have a defined alphabet."""

import getpass
import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from approvals.models import AuditRecord
from approvals.site.shop_import import ShopDataInvalid, shop_data_validate

from .test_shop_data_commands import SHOP

SECRETS = ("alice-pass-1", "sam-pass-1", "alice-pass-2", "sam-pass-2")


def _run(tmp_path, document, *args):
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(document))
    call_command("import_shop_data", str(path), *args, stdout=StringIO(), stderr=StringIO())


def _records():
    return list(AuditRecord.objects.filter(result__source="import_shop_data").order_by("id"))


def _no_secrets():
    users = get_user_model().objects.all()
    for record in AuditRecord.objects.all():
        text = json.dumps(record.result) + record.raw_arguments + json.dumps(record.approval_basis)
        for secret in SECRETS:
            assert secret not in text
        for user in users:
            assert user.password not in text
            assert user.password.split("$")[-1] not in text


def test_the_first_import_audits_every_record_it_creates_with_the_operator(db, tmp_path):
    _run(tmp_path, SHOP, "--operator", "olga")
    records = _records()
    assert [(r.event, r.subject_type, r.result["section"], r.result["outcome"]) for r in records] == [
        ("shop_data_changed", "user", "customers", "created"),
        ("shop_data_changed", "user", "staff", "created"),
        ("shop_data_changed", "order", "orders", "created"),
        ("shop_data_changed", "invoice", "invoices", "created"),
        ("standing_approval_granted", "invoice", "standing_approvals", "created"),
    ]
    assert {r.result["operator"] for r in records} == {"olga"}
    sam = get_user_model().objects.get(username="sam")
    staff = records[1]
    assert staff.subject_id == str(sam.pk)
    assert staff.result["before"] is None
    assert staff.result["after"]["groups"] == ["Invoice approvers", "Refund reviewers"]
    assert staff.result["after"]["is_staff"] is True
    assert "password" in staff.result["changed"]
    assert "_password" not in staff.result["after"] and "password" not in staff.result["after"]
    order = records[2]
    assert order.subject_id == "o-12"
    assert order.result["after"]["total_minor"] == 1000 and order.result["after"]["customer"] == "alice"
    _no_secrets()


def test_a_reimport_of_the_same_file_records_nothing(db, tmp_path):
    _run(tmp_path, SHOP, "--operator", "olga")
    before = AuditRecord.objects.count()
    _run(tmp_path, SHOP, "--operator", "olga")
    assert AuditRecord.objects.count() == before


def test_each_change_is_recorded_with_before_and_after(db, tmp_path):
    _run(tmp_path, SHOP, "--operator", "olga")
    changed = json.loads(json.dumps(SHOP))
    changed["customers"][0]["password"] = "alice-pass-2"
    changed["staff"][0]["groups"] = ["Refund reviewers"]
    changed["staff"][0]["password"] = "sam-pass-2"
    changed["orders"][0]["refunded_minor"] = 300
    changed["invoices"][0]["lines"][0]["unit_minor"] = 15000
    changed.pop("standing_approvals")
    start = AuditRecord.objects.order_by("-id").first().id

    _run(tmp_path, changed, "--operator", "pavel")

    records = list(AuditRecord.objects.filter(id__gt=start).order_by("id"))
    summary = [(r.result["section"], r.result["outcome"], r.result["changed"], r.result["operator"]) for r in records]
    assert summary == [
        ("customers", "updated", ["password"], "pavel"),
        ("staff", "updated", ["groups", "password"], "pavel"),
        ("orders", "updated", ["refunded_minor", "version"], "pavel"),
        ("invoices", "updated", ["lines", "total_minor", "version"], "pavel"),
    ]
    staff = records[1].result
    assert staff["before"]["groups"] == ["Invoice approvers", "Refund reviewers"]
    assert staff["after"]["groups"] == ["Refund reviewers"]
    order = records[2].result
    assert (order["before"]["refunded_minor"], order["after"]["refunded_minor"]) == (0, 300)
    assert (order["before"]["version"], order["after"]["version"]) == (1, 2)
    _no_secrets()


def test_a_customer_entry_that_demotes_a_staff_member_is_recorded(db, tmp_path):
    _run(tmp_path, SHOP, "--operator", "olga")
    _run(tmp_path, {"customers": [{"username": "sam", "email": "sam@example.test"}]}, "--operator", "olga")
    record = _records()[-1]
    assert record.result["changed"] == ["is_staff"]
    assert (record.result["before"]["is_staff"], record.result["after"]["is_staff"]) == (True, False)


def test_the_operator_is_required_outside_debug(db, tmp_path, settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="--operator"):
        _run(tmp_path, SHOP)
    assert get_user_model().objects.count() == 0
    assert AuditRecord.objects.count() == 0
    with pytest.raises(CommandError, match="--operator"):
        _run(tmp_path, SHOP, "--operator", "  ")


def test_in_debug_the_os_user_is_the_operator(db, tmp_path, settings):
    settings.DEBUG = True
    _run(tmp_path, SHOP)
    assert {r.result["operator"] for r in _records()} == {getpass.getuser()}


def test_seed_demo_needs_an_operator_too_outside_debug(db, settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="--operator"):
        call_command("seed_demo", "--no-token", stdout=StringIO())


# Item 7: the id alphabet -----------------------------------------------------------------------

ORDER = {
    "customer": "alice",
    "currency": "EUR",
    "total_minor": 1000,
    "status": "delivered",
    "placed_at": "2026-08-02",
    "delivered_at": "2026-08-04",
}


@pytest.mark.parametrize("good", ["2026/0042", "o-12", "ORD#4417", "a.b_c:d+e", "X" * 64])
def test_ids_of_the_alphabet_are_accepted(db, good):
    document = {
        "customers": [{"username": "alice"}],
        "orders": [{"id": good, **ORDER}],
        "invoices": [{"number": good, "customer": "alice", "currency": "EUR", "status": "issued", "lines": []}],
    }
    shop_data_validate(json.dumps(document))


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "o\x0012",
        "o-12\n",
        "o\t12",
        "%00",
        "o 12",
        " o-12",
        "-o12",
        "/etc",
        "o?12",
        "ｏ-12",
        "о-12",
        "o-12\u200b",
        "X" * 65,
        "o\u202e21",
    ],
)
def test_ids_outside_the_alphabet_are_refused_by_path(db, bad):
    document = {
        "customers": [{"username": "alice"}],
        "orders": [{"id": bad, **ORDER}],
        "invoices": [{"number": bad, "customer": "alice", "currency": "EUR", "status": "issued", "lines": []}],
    }
    with pytest.raises(ShopDataInvalid) as invalid:
        shop_data_validate(json.dumps(document))
    paths = [problem.split(":")[0] for problem in invalid.value.problems]
    assert "$.orders[0].id" in paths and "$.invoices[0].number" in paths


# Usernames have an alphabet too (issue 30) ----------------------------------------------------------


@pytest.mark.parametrize("good", ["alice", "sam.b", "ana_maria-2", "bob+shop@example.test", "X" * 150])
def test_usernames_of_the_alphabet_are_accepted(db, good):
    shop_data_validate(json.dumps({"customers": [{"username": good}]}))
    shop_data_validate(json.dumps({"staff": [{"username": good}]}))


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "<!channel>",
        "<http://evil.example/console|Open the console>",
        "alice <!here> approve at once",
        "alice\nApprove at once",
        "alice\x00",
        "ali ce",
        " alice",
        "-alice",
        "al|ice",
        "ａlice",  # full-width a
        "аlice",  # Cyrillic а
        "alice\u200b",
        "alice\u202e",
        "X" * 151,
    ],
)
def test_usernames_outside_the_alphabet_are_refused_by_path(db, bad):
    document = {"customers": [{"username": bad}], "staff": [{"username": bad, "groups": []}]}
    with pytest.raises(ShopDataInvalid) as invalid:
        shop_data_validate(json.dumps(document))
    problems = {problem.split(":")[0]: problem for problem in invalid.value.problems}
    assert "$.customers[0].username" in problems and "$.staff[0].username" in problems
    if 0 < len(bad) <= 150:
        assert "is not a valid username: use 1 to 150 ASCII letters" in problems["$.customers[0].username"]
    assert not get_user_model().objects.exists()
