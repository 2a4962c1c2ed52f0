"""Issue 37: every `manage.py` command the README prints runs as printed on the demo, outside `make run`.

The demo's values come from the `.demo.env` that the Makefile's own recipe writes (here into a scratch
directory, named by DEMO_ENV_FILE), and the database is a scratch SQLite file set up as `make run` does
(migrate, seed_demo). The production sections are left out: they run with the production environment.
"""

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRINTED = ".venv/bin/python manage.py"
RECEIPT_LINE = re.compile(r"^curl .*/api/agent/previews/\$PREVIEW/receipt > receipt\.json$")
# The demo's environment only: whatever the test run itself was given must not leak into the commands.
LEFT_OUT = {"DJANGO_SETTINGS_MODULE", "SECRET_KEY", "DEMO", "DEBUG", "DATABASE_URL", "REDIS_URL", "REQUIRE_POSTGRES"}

# Bob's: the README revokes alice's sessions before the receipt is fetched.
PROPOSE_A_REFUND = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from approvals.core.services import agent_session_create
_, token = agent_session_create(user=get_user_model().objects.get(username="bob"), tools=["refund_order"])
answer = Client().post(
    "/api/agent/tool-calls",
    {"name": "refund_order", "arguments": {"order_id": "o-17", "amount_minor": 100, "reason": "damaged"}},
    content_type="application/json",
    headers={"Authorization": f"Bearer {token}"},
)
assert answer.status_code == 201, answer.content
print(token, answer.json()["preview"]["id"])
"""

FETCH_THE_RECEIPT = """
import os, pathlib
from django.test import Client
receipt = Client().get(
    f"/api/agent/previews/{os.environ['PREVIEW']}/receipt", headers={"Authorization": f"Bearer {os.environ['TOKEN']}"}
)
assert receipt.status_code == 200, receipt.content
pathlib.Path("receipt.json").write_bytes(receipt.content)
"""


def printed_commands() -> list[str]:
    """The README's command lines outside its production sections: fenced blocks and inline code."""
    commands = []
    production = False
    in_block = False
    pending = ""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("## "):
            production = line.startswith("## Production")
        if line.strip().startswith("```"):
            in_block = not in_block
            continue
        if production:
            continue
        if in_block:
            pending += line.strip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            if pending.startswith(PRINTED) or RECEIPT_LINE.match(pending):
                commands.append(pending)
            pending = ""
        else:
            commands += re.findall(r"`(" + re.escape(PRINTED) + r" [^`]+)`", line)
    return commands


@pytest.fixture
def demo(tmp_path):
    """A scratch directory that holds the demo's .demo.env and database, and runs commands there."""
    subprocess.run(["make", "-s", "-C", str(tmp_path), "-f", str(ROOT / "Makefile"), ".demo.env"], check=True)
    for name in (".venv", "manage.py", "demo"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items() if k not in LEFT_OUT}
    env["DEMO_ENV_FILE"] = str(tmp_path / ".demo.env")
    # The README's own DATABASE_URL default is db.sqlite3 in the checkout; the test keeps the checkout's alone.
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"

    def run(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
        )

    run.env = env  # type: ignore[attr-defined]
    return run


def test_the_readme_prints_the_back_office_commands():
    names = {command.split()[2] for command in printed_commands() if command.startswith(PRINTED)}
    assert names == {
        "import_shop_data",
        "create_agent_session",
        "seed_demo",
        "revoke_agent_session",
        "seal_audit",
        "verify_audit",
        "audit_public_key",
        "verify_receipt",
        "export_evidence",
        "verify_evidence",
    }


def test_every_readme_command_runs_as_printed_on_the_demo(demo):
    for setup in (f"{PRINTED} migrate --noinput", f"{PRINTED} seed_demo"):
        result = demo(setup)
        assert result.returncode == 0, result.stderr
    checked = demo(f"{PRINTED} check")
    assert checked.returncode == 0 and "refunds.W001" not in checked.stdout + checked.stderr, checked.stderr
    proposed = demo(f"{PRINTED} shell -c {shlex.quote(PROPOSE_A_REFUND)}")
    assert proposed.returncode == 0, proposed.stderr
    token, preview = proposed.stdout.split()[-2:]
    demo.env.update(TOKEN=token, PREVIEW=preview)

    outputs = {}
    for command in printed_commands():
        if RECEIPT_LINE.match(command):  # the curl line: the same request, without a server
            command = f"{PRINTED} shell -c {shlex.quote(FETCH_THE_RECEIPT)}"
        result = demo(command)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr, f"{command}\n{result.stderr}"
        outputs.setdefault(command.split()[2], []).append(result.stdout)

    assert all(out.strip().splitlines()[-1].startswith("agt_") for out in outputs["create_agent_session"])
    assert "Imported demo/shop.json." in outputs["import_shop_data"][0]
    assert "Revoked " in outputs["revoke_agent_session"][0]
    assert re.match(r"Sealed [1-9]\d* records\.", outputs["seal_audit"][0])
    assert "Audit log intact: " in outputs["verify_audit"][0]
    assert "Receipt valid: " in outputs["verify_receipt"][0] and preview in outputs["verify_receipt"][0]
    assert "evidence.zip" in outputs["export_evidence"][0]
    assert "valid" in outputs["verify_evidence"][0].lower() and preview in outputs["verify_evidence"][0]
