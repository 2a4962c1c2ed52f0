"""Issue 16, item 3: staff review fails closed for currencies without a threshold."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import DatabaseError

from approvals.models import AuditRecord, Preview
from refunds import checks
from refunds.models import Order
from tests.conftest import propose
from tests.factories import OrderFactory

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def eur_usd_only(settings):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 10000, "USD": 10000}


@pytest.mark.parametrize(("currency", "amount"), [("JPY", 1), ("GBP", 50), ("KWD", 1), ("JPY", 9_999_999)])
def test_a_currency_without_a_threshold_always_needs_staff(alice, alice_agent, eur_usd_only, currency, amount):
    OrderFactory(number="o-200", customer=alice, currency=currency, total_minor=10_000_000)
    response = propose(alice_agent, order_id="o-200", amount_minor=amount, reason="damaged")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["preview"]["currency"] == currency
    assert body["preview"]["required_approvals"] == ["customer", "staff"]
    preview = Preview.objects.get(pk=body["preview"]["id"])
    assert preview.required_approvals == ["customer", "staff"]
    assert AuditRecord.objects.filter(preview=preview, event="proposed").count() == 1


def test_currencies_with_a_threshold_keep_it(alice, alice_agent, eur_usd_only):
    OrderFactory(number="o-201", customer=alice, currency="USD", total_minor=100_000)
    small = propose(alice_agent, order_id="o-201", amount_minor=10000, reason="damaged").json()
    large = propose(alice_agent, order_id="o-201", amount_minor=10001, reason="damaged").json()
    assert small["preview"]["required_approvals"] == ["customer"]
    assert large["preview"]["required_approvals"] == ["customer", "staff"]


@pytest.mark.parametrize(("amount", "required"), [(5000, ["customer"]), (5001, ["customer", "staff"])])
def test_a_catch_all_applies_to_the_other_currencies(alice, alice_agent, settings, amount, required):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 10000, "*": 5000}
    OrderFactory(number="o-202", customer=alice, currency="GBP", total_minor=100_000)
    body = propose(alice_agent, order_id="o-202", amount_minor=amount, reason="damaged").json()
    assert body["preview"]["required_approvals"] == required
    OrderFactory(number="o-203", customer=alice, currency="EUR", total_minor=100_000)
    eur = propose(alice_agent, order_id="o-203", amount_minor=amount, reason="damaged").json()
    assert eur["preview"]["required_approvals"] == ["customer"]  # its own threshold wins


def test_the_system_check_warns_about_order_currencies_without_a_threshold(alice, eur_usd_only):
    OrderFactory(customer=alice, currency="EUR")
    OrderFactory(customer=alice, currency="JPY")
    OrderFactory(customer=alice, currency="KWD")
    (warning,) = checks.staff_review_thresholds_cover_order_currencies()
    assert warning.id == "refunds.W001"
    assert "JPY, KWD" in warning.msg and "EUR" not in warning.msg
    with pytest.raises(Exception, match="refunds.W001"):
        call_command("check", "--fail-level", "WARNING")


def test_no_warning_when_every_currency_is_covered(alice, settings):
    OrderFactory(customer=alice, currency="JPY")
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 1, "JPY": 1}
    assert checks.staff_review_thresholds_cover_order_currencies() == []
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 1, "*": 1}
    assert checks.staff_review_thresholds_cover_order_currencies() == []


def test_the_check_is_quiet_without_tables(monkeypatch, settings):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 1}

    class NotMigrated:
        def values_list(self, *args, **kwargs):
            raise DatabaseError("no such table: refunds_order")

    monkeypatch.setattr(Order, "objects", NotMigrated())
    assert checks.staff_review_thresholds_cover_order_currencies() == []


def test_check_runs_on_a_database_that_is_not_migrated(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "STAFF_REVIEW_THRESHOLDS": "EUR:10000,*:5000",
    }
    env.pop("REQUIRE_POSTGRES", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    env["STAFF_REVIEW_THRESHOLDS"] = "EUR:10000"
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_the_catch_all_is_read_from_the_environment():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "STAFF_REVIEW_THRESHOLDS": "EUR:10000, *:5000",
    }
    code = "import django; django.setup(); from django.conf import settings; print(settings.STAFF_REVIEW_THRESHOLDS)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "{'EUR': 10000, '*': 5000}", result.stderr
