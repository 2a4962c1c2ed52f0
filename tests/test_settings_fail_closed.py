"""Issue 16, item 10: the demo is never production by accident."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHOW = "import django; django.setup(); from django.conf import settings as s; print(s.DEBUG, s.SECRET_KEY[:8])"


def _python(code, **env_vars):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DEBUG", "DEMO", "SECRET_KEY", "DATABASE_URL", "REQUIRE_POSTGRES")
    }
    # A checkout where `make run` was used holds a .demo.env; these tests ask for the demo themselves.
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings", "DEMO_ENV_FILE": "/nonexistent/.demo.env", **env_vars})
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_with_no_environment_the_settings_refuse_to_start():
    result = _python(SHOW)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and "Set SECRET_KEY" in result.stderr


@pytest.mark.parametrize("debug", ["false", "0", "no"])
def test_debug_off_without_a_key_refuses(debug):
    result = _python(SHOW, DEBUG=debug)
    assert result.returncode != 0 and "Set SECRET_KEY" in result.stderr


def test_a_key_alone_is_production_debug_stays_off():
    result = _python(SHOW, SECRET_KEY="a-long-random-production-value-" + "x" * 40)
    assert result.stdout.split() == ["False", "a-long-r"], result.stderr


@pytest.mark.parametrize(
    ("extra", "expected"),
    [({"DEMO": "1"}, "False"), ({"DEBUG": "true"}, "True"), ({"DEMO": "1", "DEBUG": "true"}, "True")],
)
def test_the_demo_values_only_when_asked_for(extra, expected):
    result = _python(SHOW, **extra)
    assert result.stdout.split() == [expected, "insecure"], result.stderr


def test_the_production_404_lists_no_url_patterns():
    code = textwrap.dedent("""
        import django; django.setup()
        from django.test import Client
        from django.test.utils import setup_test_environment
        setup_test_environment(debug=False)
        response = Client().get("/no-such-page/")
        print(response.status_code, "admin/" in response.content.decode(), "console/" in response.content.decode())
    """)
    result = _python(code, SECRET_KEY="k" * 60, ALLOWED_HOSTS="testserver")
    assert result.stdout.split() == ["404", "False", "False"], result.stderr


def test_the_demo_runs_with_debug_off_its_own_404_and_its_assets_served():
    """The demo (DEMO=1, as .demo.env sets) shows the app's 404, never Django's debug page, and still
    serves its stylesheet and favicon (WhiteNoise, from the app's folders, no collect step)."""
    code = textwrap.dedent("""
        import django; django.setup()
        from django.conf import settings
        from django.test import Client
        from django.test.utils import setup_test_environment
        setup_test_environment(debug=False)
        client = Client()
        missing = client.get("/no-such-page/")
        body = missing.content.decode()
        css = client.get("/static/css/app.css")
        icon = client.get("/favicon.ico", follow=True)
        print(settings.DEBUG, missing.status_code, "Page not found" in body, "URLconf" in body,
              css.status_code, icon.status_code, icon.get("Content-Type"))
    """)
    result = _python(code, DEMO="1")
    assert result.stdout.split() == ["False", "404", "True", "False", "200", "200", "image/x-icon"], result.stderr


def test_make_run_asks_for_the_demo_explicitly(tmp_path):
    makefile = (ROOT / "Makefile").read_text()
    assert "run: $(STAMP) .demo.env" in makefile
    subprocess.run(["make", "-s", "-C", str(tmp_path), "-f", str(ROOT / "Makefile"), ".demo.env"], check=True)
    written = dict(line.split("=", 1) for line in (tmp_path / ".demo.env").read_text().splitlines())
    assert written["DEMO"] == "1"
    assert written["AUDIT_SIGNING_KEY"] == (tmp_path / ".audit-signing-key").read_text().strip()
    assert written["AUDIT_CHECKPOINT_FILE"] == str(tmp_path / ".audit-checkpoints.jsonl")


def test_the_demo_file_is_read_without_a_key_and_ignored_with_one(tmp_path):
    demo_file = tmp_path / ".demo.env"
    demo_file.write_text("DEMO=1\n")
    result = _python(SHOW, DEMO_ENV_FILE=str(demo_file))
    assert result.stdout.split() == ["False", "insecure"], result.stderr
    result = _python(SHOW, DEMO_ENV_FILE=str(demo_file), SECRET_KEY="a-long-random-production-value-" + "x" * 40)
    assert result.stdout.split() == ["False", "a-long-r"], result.stderr


def test_sqlite_waits_for_the_lock_instead_of_failing(settings):
    result = _python(
        "import django; django.setup(); from django.conf import settings as s; "
        "import json; print(json.dumps(s.DATABASES['default']['OPTIONS']))",
        DEMO="1",
    )
    options = json.loads(result.stdout)
    assert options["timeout"] >= 20
    assert options["transaction_mode"] == "IMMEDIATE"


CONCURRENT_CONFIRMATIONS = textwrap.dedent("""
    import json, threading
    import django
    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment
    setup_test_environment(debug=False)
    call_command("migrate", verbosity=0)
    from approvals.models import Preview
    from approvals.core.services import agent_session_create, proposal_submit
    from approvals.core.registry import registry
    from refunds.models import Order, Refund
    from tests.factories import OrderFactory, UserFactory

    alice = UserFactory(username="alice")
    order = OrderFactory(number="o-12", customer=alice, total_minor=100000)
    session, _ = agent_session_create(user=alice, tools=["refund_order"])
    outcome = proposal_submit(agent_session=session, action=registry.action("refund_order"),
                              arguments={"order_id": "o-12", "amount_minor": 500, "reason": "damaged"},
                              raw_arguments="{}")
    preview = outcome.preview
    barrier = threading.Barrier(8)
    codes = []

    def confirm():
        client = Client(raise_request_exception=False)
        client.force_login(alice)
        barrier.wait()
        codes.append(client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest}).status_code)

    threads = [threading.Thread(target=confirm) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    preview.refresh_from_db()
    order.refresh_from_db()
    print(json.dumps({"codes": sorted(codes), "status": preview.status, "refunds": Refund.objects.count(),
                      "refunded": order.refunded_minor}))
""")


def test_eight_concurrent_confirmations_on_sqlite_give_no_500(tmp_path):
    result = _python(
        CONCURRENT_CONFIRMATIONS,
        DJANGO_SETTINGS_MODULE="config.settings_test",
        DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        SECRET_KEY="k" * 60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert 500 not in outcome["codes"], outcome
    assert len(outcome["codes"]) == 8
    assert outcome["status"] == "executed"
    assert (outcome["refunds"], outcome["refunded"]) == (1, 500)
