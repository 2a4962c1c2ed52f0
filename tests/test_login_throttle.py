"""Issue 16, items 1 and 2: every login path is throttled, with keys that hold."""

import importlib
import json
import threading
import uuid

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.urls import clear_url_caches, resolve
from django.urls.exceptions import Resolver404

from approvals.site.login import client_address, username_key
from tests.factories import StaffFactory, UserFactory

PASSWORD = "pass-for-tests"


@pytest.fixture
def sam(db):
    sam = StaffFactory(username="sam")
    sam.groups.set([Group.objects.get(name="Refund reviewers")])
    return sam


def _logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_the_admin_login_is_throttled_like_the_login_page(sam, settings):
    client = Client()
    for _ in range(12):
        response = client.post("/admin/login/", {"username": "sam", "password": "wrong"})
        assert response.status_code == 200
    response = client.post("/admin/login/", {"username": "sam", "password": PASSWORD, "next": "/admin/"})
    assert response.status_code == 200  # the form again, not the 302 of a login
    assert not _logged_in(client)
    assert client.get("/console/").status_code == 302  # to the login page: no session
    # The login page shares the same counters: it says why.
    response = client.post("/accounts/login/", {"username": "sam", "password": PASSWORD})
    assert response.status_code == 429
    assert "Too many failed attempts" in response.content.decode()
    assert not _logged_in(client)


def test_a_right_password_within_the_limit_still_logs_in_and_does_not_count(sam, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    client = Client()
    for _ in range(2):
        client.post("/admin/login/", {"username": "sam", "password": "wrong"})
    for _ in range(3):  # successes are taken off the counts again
        client.logout()
        response = client.post("/accounts/login/", {"username": "sam", "password": PASSWORD})
        assert response.status_code == 302
    client.logout()
    assert client.post("/admin/login/", {"username": "sam", "password": "wrong"}).status_code == 200
    response = client.post("/accounts/login/", {"username": "sam", "password": PASSWORD})
    assert response.status_code == 429


def test_authenticate_itself_is_throttled_whatever_calls_it(db, settings):
    settings.LOGIN_FAILURE_LIMIT = 2
    UserFactory(username="carol")
    assert authenticate(None, username="carol", password="wrong") is None
    assert authenticate(None, username="carol", password="wrong") is None
    assert authenticate(None, username="carol", password=PASSWORD) is None
    settings.LOGIN_FAILURE_LIMIT = 10
    assert authenticate(None, username="carol", password=PASSWORD) is not None


@pytest.mark.parametrize("variant", ["ｂｏｂ", "𝐛𝐨𝐛", "BOB", "Bob", "ᵇᵒᵇ"])
def test_look_alike_usernames_share_one_bucket(db, variant, settings):
    UserFactory(username="bob")
    assert username_key(variant) == username_key("bob")
    for _ in range(5):
        # Each from its own address: only the username's bucket is at work here.
        Client(REMOTE_ADDR=f"10.0.0.{_ + 1}").post("/accounts/login/", {"username": "bob", "password": "wrong"})
    # From an address that already tried one spelling: the variant shares its bucket.
    client = Client(REMOTE_ADDR="10.0.0.1")
    response = client.post("/accounts/login/", {"username": variant, "password": PASSWORD})
    assert response.status_code == 429
    assert not _logged_in(client)
    # Django's form normalizes the full-width name to `bob` (NFKC): it would have logged in as bob.
    settings.LOGIN_FAILURE_LIMIT = 100
    if variant == "ｂｏｂ":
        assert (
            Client(REMOTE_ADDR="10.0.2.1")
            .post("/accounts/login/", {"username": variant, "password": PASSWORD})
            .status_code
            == 302
        )


def test_look_alike_names_get_no_fresh_tries(db):
    UserFactory(username="bob")
    for name in ["bob", "ｂｏｂ", "𝐛𝐨𝐛", "BOB", "bob"]:
        Client(REMOTE_ADDR="10.9.0.1").post("/accounts/login/", {"username": name, "password": "wrong"})
    # Five failures in all: the sixth try of any spelling is refused, also with the right password.
    response = Client(REMOTE_ADDR="10.9.0.1").post("/accounts/login/", {"username": "𝐛𝐨𝐛", "password": PASSWORD})
    assert response.status_code == 429
    # A new address gets its one try of the paused name, but no more: any spelling counts as that name.
    assert (
        Client(REMOTE_ADDR="10.9.0.2").post("/accounts/login/", {"username": "BOB", "password": "x"}).status_code == 429
    )
    response = Client(REMOTE_ADDR="10.9.0.2").post("/accounts/login/", {"username": "ｂｏｂ", "password": PASSWORD})
    assert response.status_code == 429


def test_behind_a_trusted_proxy_each_client_has_its_own_address_bucket(db, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    UserFactory(username="dora")
    UserFactory(username="erin")
    proxy = "192.0.2.10"
    for i in range(5):
        Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="203.0.113.7").post(
            "/accounts/login/", {"username": f"nobody{i}", "password": "wrong"}
        )
    # The attacker's address is paused...
    attacker = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert attacker.post("/accounts/login/", {"username": "erin", "password": PASSWORD}).status_code == 429
    # ...and a spoofed left-most entry does not get them a fresh one: the proxy appends what it saw.
    spoofed = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.1, 203.0.113.7")
    assert spoofed.post("/accounts/login/", {"username": "erin", "password": PASSWORD}).status_code == 429
    # Another client behind the same proxy is not locked out.
    other = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="203.0.113.99")
    assert other.post("/accounts/login/", {"username": "dora", "password": PASSWORD}).status_code == 302


def test_without_a_trusted_proxy_the_forwarded_header_is_ignored(db, settings):
    assert settings.TRUSTED_PROXY_COUNT == 0
    UserFactory(username="dora")
    for i in range(5):
        Client(REMOTE_ADDR="198.51.100.5", HTTP_X_FORWARDED_FOR=f"10.1.1.{i}").post(
            "/accounts/login/", {"username": f"nobody{i}", "password": "wrong"}
        )
    client = Client(REMOTE_ADDR="198.51.100.5", HTTP_X_FORWARDED_FOR="10.1.1.200")
    assert client.post("/accounts/login/", {"username": "dora", "password": PASSWORD}).status_code == 429


@pytest.mark.parametrize(
    ("count", "header", "remote", "expected"),
    [
        (0, "1.1.1.1", "9.9.9.9", "9.9.9.9"),
        (1, "1.1.1.1", "9.9.9.9", "1.1.1.1"),
        (1, "6.6.6.6, 1.1.1.1", "9.9.9.9", "1.1.1.1"),
        (2, "6.6.6.6, 1.1.1.1, 2.2.2.2", "9.9.9.9", "1.1.1.1"),
        (2, "1.1.1.1", "9.9.9.9", "9.9.9.9"),  # fewer hops than proxies: not through them, not trusted
        (1, "", "9.9.9.9", "9.9.9.9"),
    ],
)
def test_client_address(rf, settings, count, header, remote, expected):
    settings.TRUSTED_PROXY_COUNT = count
    request = rf.get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=header)
    assert client_address(request) == expected


def test_a_configured_header_is_read(rf, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    settings.CLIENT_IP_HEADER = "HTTP_X_REAL_IP"
    request = rf.get("/", REMOTE_ADDR="9.9.9.9", HTTP_X_REAL_IP="4.4.4.4", HTTP_X_FORWARDED_FOR="5.5.5.5")
    assert client_address(request) == "4.4.4.4"


@pytest.fixture(params=["locmem", "redis"])
def counter_cache(request, settings):
    if request.param == "redis":
        if not settings.REDIS_URL:
            pytest.skip("needs REDIS_URL")
        settings.CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": settings.REDIS_URL,
                "KEY_PREFIX": f"test-{uuid.uuid4().hex}",
            }
        }
    return request.param


@pytest.mark.parametrize("clean_tries", [0, 5])
def test_sixteen_parallel_guesses_get_no_more_than_the_limit_checked(
    counter_cache, clean_tries, monkeypatch, rf, settings
):
    """The counter is incremented before it is compared: of 16 guesses at once from 16 addresses, 5 reach
    the password check, and then no more than the paused name's budget of clean addresses."""
    settings.LOGIN_PAUSE_CLEAN_ADDRESS_TRIES = clean_tries
    checked = []
    barrier = threading.Barrier(16)

    def slow_check(self, request, username=None, password=None, **kwargs):
        checked.append(password)
        return None

    monkeypatch.setattr(ModelBackend, "authenticate", slow_check)
    pauses = []
    monkeypatch.setattr("approvals.site.login._pause_audit", lambda scope, *args: pauses.append(scope))
    results = []

    def guess(n):
        request = rf.post("/accounts/login/", REMOTE_ADDR=f"10.7.0.{n}")
        barrier.wait()
        results.append(authenticate(request, username="bob", password=f"guess-{n}"))

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [None] * 16
    assert len(checked) == settings.LOGIN_FAILURE_LIMIT + clean_tries == 5 + clean_tries
    assert pauses == ["username"]  # recorded once as it began, however many guesses raced past it


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_sixteen_parallel_logins_over_http_let_no_guess_through_after_the_limit(settings):
    """Real logins at once against PostgreSQL: the right password among 16 guesses, sent after the
    limit was used up by the first five, never logs in (with no tries for clean addresses: with them,
    test_clean_addresses_get_no_more_than_their_budget_while_paused)."""
    settings.LOGIN_PAUSE_CLEAN_ADDRESS_TRIES = 0
    UserFactory(username="bob")
    for _ in range(5):
        Client(REMOTE_ADDR="10.8.0.1").post("/accounts/login/", {"username": "bob", "password": "wrong"})
    barrier = threading.Barrier(16)
    codes = []

    def attempt(n):
        try:
            client = Client(REMOTE_ADDR=f"10.8.1.{n}")
            barrier.wait()
            password = PASSWORD if n == 7 else f"guess-{n}"
            response = client.post("/accounts/login/", {"username": "ｂｏｂ", "password": password})
            codes.append((response.status_code, _logged_in(client)))
        finally:
            connection.close()  # this thread's own; left open, it keeps the test database from being dropped

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert codes == [(429, False)] * 16


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_parallel_guesses_over_http_are_counted_before_they_are_checked():
    UserFactory(username="bob")
    barrier = threading.Barrier(16)
    codes = []

    def attempt(n):
        try:
            client = Client(REMOTE_ADDR=f"10.8.2.{n}")
            barrier.wait()
            codes.append(client.post("/accounts/login/", {"username": "bob", "password": f"guess-{n}"}).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [200] * 5 + [429] * 11


def _reload_urls(settings, enabled):
    import config.urls

    settings.ADMIN_ENABLED = enabled
    importlib.reload(config.urls)
    clear_url_caches()


def test_the_admin_is_not_served_when_disabled(settings):
    try:
        _reload_urls(settings, False)
        with pytest.raises(Resolver404):
            resolve("/admin/login/")
        assert resolve("/accounts/login/").url_name == "login"
    finally:
        _reload_urls(settings, True)
    assert resolve("/admin/login/").url_name == "login"


def test_the_admin_is_off_by_default_outside_debug():
    import subprocess
    import sys
    from pathlib import Path

    code = "from django.conf import settings; import django; django.setup(); print(settings.ADMIN_ENABLED)"
    root = Path(__file__).resolve().parent.parent
    base = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "k" * 60}
    answers = {}
    for name, extra in {"production": {}, "debug": {"DEBUG": "true"}, "asked": {"ADMIN_ENABLED": "true"}}.items():
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=root, env={**base, **extra}, capture_output=True, text=True, timeout=60
        )
        answers[name] = result.stdout.strip()
    assert answers == {"production": "False", "debug": "True", "asked": "True"}


# Issue 30: a paused username still lets its person in from an address with no failures -------------


def test_five_wrong_passwords_elsewhere_do_not_lock_the_person_out_of_a_clean_address(sam):
    for _ in range(5):
        Client(REMOTE_ADDR="203.0.113.50").post("/accounts/login/", {"username": "sam", "password": "wrong"})
    # The attacker's address stays paused, also with the right password...
    attacker = Client(REMOTE_ADDR="203.0.113.50")
    assert attacker.post("/accounts/login/", {"username": "sam", "password": PASSWORD}).status_code == 429
    assert not _logged_in(attacker)
    # ...and sam, from an address with no failures, logs in.
    office = Client(REMOTE_ADDR="198.51.100.20")
    assert office.post("/accounts/login/", {"username": "sam", "password": PASSWORD}).status_code == 302
    assert _logged_in(office)


def test_a_clean_address_gets_one_try_while_the_username_is_paused(sam):
    for _ in range(5):
        Client(REMOTE_ADDR="203.0.113.51").post("/accounts/login/", {"username": "sam", "password": "wrong"})
    other = Client(REMOTE_ADDR="203.0.113.52")
    response = other.post("/accounts/login/", {"username": "sam", "password": "wrong"})
    assert response.status_code == 429  # checked, wrong: answered like the pause
    # That address now has a failure: the right password waits like everywhere else.
    assert other.post("/accounts/login/", {"username": "sam", "password": PASSWORD}).status_code == 429
    assert not _logged_in(other)


def test_clean_addresses_get_no_more_than_their_budget_while_paused(sam, settings):
    settings.LOGIN_PAUSE_CLEAN_ADDRESS_TRIES = 2
    for _ in range(5):
        Client(REMOTE_ADDR="203.0.113.60").post("/accounts/login/", {"username": "sam", "password": "wrong"})
    for n in range(2):
        Client(REMOTE_ADDR=f"203.0.114.{n}").post("/accounts/login/", {"username": "sam", "password": "wrong"})
    late = Client(REMOTE_ADDR="203.0.114.99")
    assert late.post("/accounts/login/", {"username": "sam", "password": PASSWORD}).status_code == 429
    settings.LOGIN_PAUSE_CLEAN_ADDRESS_TRIES = 0  # the old rule: a paused username is paused everywhere
    cache_cleared = Client(REMOTE_ADDR="203.0.114.100")
    assert cache_cleared.post("/accounts/login/", {"username": "sam", "password": PASSWORD}).status_code == 429


def test_a_pause_is_audited_once_for_staff_to_see(sam, settings):
    from approvals.models import AuditEvent, AuditRecord

    for _ in range(8):
        Client(REMOTE_ADDR="203.0.113.70").post("/accounts/login/", {"username": "SAM", "password": "wrong"})
    records = AuditRecord.objects.filter(event=AuditEvent.LOGIN_PAUSED).order_by("id")
    assert [r.result["scope"] for r in records] == ["username", "address"]
    by_scope = {r.result["scope"]: r.result for r in records}
    assert by_scope["username"]["username"] == "sam"
    assert by_scope["username"]["address"] == "203.0.113.70"
    assert by_scope["username"]["attempts"] == settings.LOGIN_FAILURE_LIMIT + 1
    assert all(r.action == "" and r.actor is None for r in records)
    assert all("wrong" not in json.dumps(r.result) for r in records)  # never a password


def test_the_auditor_sees_login_pauses_in_the_export_and_a_reviewer_does_not(sam, settings):
    from django.contrib.auth.models import Permission

    from tests.console.test_audit import export, streamed

    for _ in range(6):
        Client(REMOTE_ADDR="203.0.113.80").post("/accounts/login/", {"username": "sam", "password": "wrong"})
    reviewer = Client()
    reviewer.force_login(sam)
    assert "login_paused" not in streamed(export(reviewer, "csv"))
    sam.user_permissions.add(Permission.objects.get(content_type__app_label="approvals", codename="audit_everything"))
    body = streamed(export(reviewer, "csv"))
    assert body.count("login_paused") == 2 and "203.0.113.80" in body
