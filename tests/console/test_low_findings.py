"""Issue 30, the low findings that are not about scopes: the session label stays among the agent's
claims, CSV cells are defused after `;` too, receipts must name their preview, the probes carry the
security headers, a reactivated person's old agent tokens stay dead."""

import csv
import io
import json
import re
from io import StringIO

import pytest
from django.core.management import call_command

from approvals.console.exports import audit_csv
from approvals.console.selectors import AUDIT_EXPORT_FIELDS
from approvals.models import AgentSession, AuditEvent, AuditRecord
from tests.conftest import agent_client_for
from tests.factories import StaffFactory

from .conftest import confirmed

# The session label -------------------------------------------------------------------------------


def _section(html: str, heading_id: str) -> str:
    match = re.search(rf'<section[^>]*aria-labelledby="{heading_id}".*?</section>', html, re.S)
    assert match, heading_id
    return match.group(0)


def test_the_session_label_is_shown_only_among_the_agents_claims(big_order, reviewer_client):
    label = "APPROVED BY FINANCE – refund 10000"
    agent = agent_client_for(big_order.customer, label=label)
    raw = '{"order_id": "o-77", "amount_minor": 12000, "reason": "damaged"}'
    response = agent.post("/api/agent/tool-calls", {"name": "refund_order", "arguments": raw}, format="json")
    assert response.status_code == 201
    from approvals.models import Preview

    preview = confirmed(Preview.objects.get(pk=response.json()["preview"]["id"]))
    html = reviewer_client.get(f"/console/previews/{preview.pk}/").content.decode()
    exact = _section(html, "exact-title")
    assert label not in exact
    assert agent.agent_session.token_prefix in exact  # the session itself is still named, by its token
    unverified = _section(html, "unverified-title")
    assert label in unverified and "Unverified" in unverified
    assert html.count(label) == 1


# CSV --------------------------------------------------------------------------------------------


def _row(raw_arguments):
    row = dict.fromkeys(AUDIT_EXPORT_FIELDS)
    row["raw_arguments"] = raw_arguments
    return row


def _cells(values):
    body = "".join(audit_csv(_row(v) for v in values))
    return [r["raw_arguments"] for r in csv.DictReader(io.StringIO(body))], body


@pytest.mark.parametrize(
    "value",
    [
        "x;=HYPERLINK(1)",
        "x; =1+1",
        "1;+2",
        "a;-2",
        "a;@SUM(1)",
        "a;\t=1",
        "a,=1",
    ],
)
def test_a_formula_after_a_separator_is_defused(value):
    cells, body = _cells([value])
    assert cells == ["'" + value]


@pytest.mark.parametrize("value", ["=1", "+1", "-1", "@A1", "\t=1", "\r=1"])
def test_a_formula_at_the_start_is_defused(value):
    assert _cells([value])[0] == ["'" + value]


def test_harmless_text_is_kept_and_every_cell_is_quoted():
    cells, body = _cells(["plain; text, with a - dash"])
    assert cells == ["plain; text, with a - dash"]
    header, line = body.splitlines()[:2]
    assert header == ",".join(f'"{name}"' for name in AUDIT_EXPORT_FIELDS)
    assert line.startswith('"","",""')  # empty cells are quoted too


# Receipts ---------------------------------------------------------------------------------------


@pytest.fixture
def receipt_and_key(awaiting_staff, reviewer_client, tmp_path):
    from approvals.audit.seal import public_key

    response = reviewer_client.get(f"/console/previews/{awaiting_staff.pk}/receipt")
    assert response.status_code == 200
    return json.loads(response.content), public_key()


def _verify(receipt, tmp_path):
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(receipt))
    out, err = StringIO(), StringIO()
    try:
        call_command("verify_receipt", str(path), stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def test_a_receipt_without_its_preview_is_refused(receipt_and_key, tmp_path):
    receipt, _ = receipt_and_key
    assert _verify(receipt, tmp_path)[0] == 0
    del receipt["preview"]
    code, out, err = _verify(receipt, tmp_path)
    assert code == 1 and "Receipt valid" not in out
    assert "INVALID: the receipt names no preview." in err


def test_a_receipt_holding_another_previews_records_is_refused(receipt_and_key, tmp_path):
    from approvals.audit.log import receipt_check

    receipt, key = receipt_and_key
    receipt["preview"] = "0f8e0000-0000-0000-0000-000000000000"
    check = receipt_check(receipt, key)
    assert not check.valid
    code, out, err = _verify(receipt, tmp_path)
    assert code == 1
    assert "is about another preview" in err


def test_a_receipt_naming_its_preview_in_another_type_is_refused(receipt_and_key, tmp_path):
    receipt, _ = receipt_and_key
    receipt["preview"] = ["x"]
    code, _, err = _verify(receipt, tmp_path)
    assert code == 1 and "INVALID: the receipt names no preview." in err


# The probes' headers ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_the_probes_carry_the_same_security_headers_as_pages(db, client, path):
    page = client.get("/accounts/login/")
    probe = client.get(path)
    assert probe.status_code == 200
    for header in (
        "Content-Security-Policy",
        "X-Frame-Options",
        "X-Content-Type-Options",
        "Referrer-Policy",
        "Cross-Origin-Opener-Policy",
    ):
        assert probe[header] == page[header], header
    assert probe["Cache-Control"] == "no-store"


# Reactivated people's tokens --------------------------------------------------------------------


def test_deactivating_a_person_revokes_their_agent_sessions_and_reactivating_does_not_revive_them(alice):
    agent = agent_client_for(alice)
    assert agent.get("/api/agent/tools").status_code == 200
    alice.is_active = False
    alice.save()
    assert AgentSession.objects.get(pk=agent.agent_session.pk).revoked_at is not None
    record = AuditRecord.objects.get(event=AuditEvent.AGENT_SESSION_REVOKED)
    assert record.result["reason"] == "person_deactivated"
    alice.is_active = True
    alice.save()
    response = agent.get("/api/agent/tools")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "This agent session was revoked."
    # A token minted after the reactivation works.
    fresh = agent_client_for(alice)
    assert fresh.get("/api/agent/tools").status_code == 200


def test_a_person_deactivated_behind_the_models_back_gets_no_old_token_back(alice):
    """`QuerySet.update` sends no signal; the reactivation itself then ends the sessions from before."""
    from django.contrib.auth import get_user_model

    agent = agent_client_for(alice)
    get_user_model().objects.filter(pk=alice.pk).update(is_active=False)
    assert agent.get("/api/agent/tools").status_code == 401  # an inactive person's token never works
    alice.refresh_from_db()
    alice.is_active = True
    alice.save()
    assert agent.get("/api/agent/tools").status_code == 401
    assert agent_client_for(alice).get("/api/agent/tools").status_code == 200


def test_other_saves_of_a_person_leave_their_sessions_alone(alice):
    agent = agent_client_for(alice)
    alice.email = "alice@elsewhere.example"
    alice.save()
    staff = StaffFactory(username="sol")
    staff.save()
    assert agent.get("/api/agent/tools").status_code == 200
    assert not AuditRecord.objects.filter(event=AuditEvent.AGENT_SESSION_REVOKED).exists()
