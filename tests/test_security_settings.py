import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import cache

from tests.factories import UserFactory

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


def test_production_settings_pass_the_deploy_check_with_no_warnings(tmp_path):
    env = {
        **os.environ,
        # A database of its own: the checks also read the data (refunds.W001), and the developer's
        # db.sqlite3 may hold the demo's orders in currencies without a threshold.
        "DATABASE_URL": os.environ.get("DATABASE_URL") or f"sqlite:///{tmp_path / 'deploy-check.sqlite3'}",
        "DEBUG": "false",
        "HTTPS": "true",
        "SECRET_KEY": "x7" * 30 + "-a-long-random-production-secret",
        "ALLOWED_HOSTS": "support.shop.example",
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_pages_carry_security_headers_and_a_content_security_policy(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    csp = response["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"


def test_repeated_failed_logins_are_throttled_and_a_right_password_then_waits_too(db, client, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    UserFactory(username="alice")
    for _ in range(3):
        response = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
        assert response.status_code == 200
        assert "correct username and password" in response.content.decode()
    response = client.post("/accounts/login/", {"username": "alice", "password": "pass-for-tests"})
    assert response.status_code == 429
    assert response["Retry-After"] == str(settings.LOGIN_FAILURE_WINDOW_SECONDS)
    assert "Too many failed attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_right_password_logs_in_below_the_limit(db, client):
    UserFactory(username="alice")
    client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    response = client.post("/accounts/login/", {"username": "alice", "password": "pass-for-tests"})
    assert response.status_code == 302
    assert client.session["_auth_user_id"]
