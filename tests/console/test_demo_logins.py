"""The demo logins `make run` prints work for the console: sam reviews, bill and alice do not."""

import io

from django.core.management import call_command
from django.test import Client


def test_the_printed_demo_logins_reach_the_console_as_promised(db):
    call_command("seed_demo", "--no-token", "--operator", "ops-tester", stdout=io.StringIO())
    sam = Client()
    assert sam.login(username="sam", password="sam-demo-pass")
    assert sam.get("/")["Location"] == "/console/"
    assert sam.get("/console/").status_code == 200
    assert sam.get("/console/audit/").status_code == 200
    for username in ("bill", "alice"):
        client = Client()
        assert client.login(username=username, password=f"{username}-demo-pass")
        assert client.get("/console/").status_code == 403
