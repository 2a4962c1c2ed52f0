"""The audit trail: per-preview and per-order timelines, and the CSV / JSON lines export."""

import csv
import io
import json
from datetime import timedelta

from django.utils import timezone

from approvals.console.selectors import AUDIT_EXPORT_FIELDS
from approvals.models import AuditEvent, AuditRecord
from tests.conftest import agent_client_for, propose, tampering

from .conftest import logged_in
from .test_decisions import approve
from .test_queue import text


def export(client, fmt, start=None, end=None):
    start = start or timezone.now() - timedelta(hours=1)
    end = end or timezone.now() + timedelta(hours=1)
    fmt_time = "%Y-%m-%dT%H:%M"
    return client.get(
        "/console/audit/export",
        {"start": start.strftime(fmt_time), "end": end.strftime(fmt_time), "format": fmt},
    )


def streamed(response) -> str:
    assert response.streaming
    return b"".join(response.streaming_content).decode()


def test_the_preview_timeline_lists_every_step_with_actor_and_facts(
    awaiting_staff, reviewer, reviewer_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        approve(reviewer_client, awaiting_staff)
    page = text(reviewer_client.get(f"/console/previews/{awaiting_staff.pk}/audit/").content.decode())
    positions = [page.index(word) for word in ("Proposed", "Confirmed", "Approved", "Executed")]
    assert positions == sorted(positions)
    assert "alice" in page and reviewer.username in page and "the system (worker)" in page
    assert '"amount_minor": 12000' in page  # the raw arguments as received
    assert awaiting_staff.digest in page  # the approval basis


def test_the_order_timeline_includes_refused_proposals_that_named_it(awaiting_staff, reviewer_client):
    agent = agent_client_for(awaiting_staff.actor)
    assert propose(agent, order_id="o-77", amount_minor=99999999, reason="damaged").status_code == 422
    page = text(reviewer_client.get("/console/subjects/order/audit/?id=o-77").content.decode())
    assert "Proposal Refused" in page and "amount_exceeds_remaining" in page and "99999999" in page
    assert "Proposed" in page and "Confirmed" in page
    assert reviewer_client.get("/console/subjects/order/audit/?id=o-nothing").status_code == 404


def as_auditor(user):
    """The whole log is the auditor's (approvals.audit_everything); tests/console/test_scopes.py has the scopes."""
    from django.contrib.auth.models import Permission

    user.user_permissions.add(Permission.objects.get(content_type__app_label="approvals", codename="audit_everything"))


def test_csv_export_has_every_record_in_the_range_and_defuses_formulas(awaiting_staff, reviewer, reviewer_client):
    as_auditor(reviewer)
    agent = agent_client_for(awaiting_staff.actor)
    response = agent.post(
        "/api/agent/tool-calls", {"name": "refund_order", "arguments": "=HYPERLINK(1)"}, format="json"
    )
    assert response.status_code == 400
    old = AuditRecord.objects.filter(event=AuditEvent.AGENT_SESSION_CREATED).first()
    with tampering():
        AuditRecord.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=3))

    response = export(reviewer_client, "csv")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="audit-')
    rows = list(csv.DictReader(io.StringIO(streamed(response))))
    expected = AuditRecord.objects.exclude(pk=old.pk).order_by("id")
    assert [int(r["id"]) for r in rows] == list(expected.values_list("id", flat=True))
    assert list(rows[0]) == list(AUDIT_EXPORT_FIELDS)

    by_event = {r["event"]: r for r in rows}
    proposed = by_event["proposed"]
    assert proposed["preview_id"] == str(awaiting_staff.pk) and proposed["actor"] == "alice"
    assert json.loads(proposed["raw_arguments"]) == {"order_id": "o-77", "amount_minor": 12000, "reason": "damaged"}
    confirmed = by_event["confirmed"]
    assert json.loads(confirmed["approval_basis"])["digest"] == awaiting_staff.digest
    assert by_event["proposal_invalid"]["raw_arguments"] == "'=HYPERLINK(1)"


def test_json_lines_export_keeps_exact_values(awaiting_staff, reviewer, reviewer_client):
    as_auditor(reviewer)
    agent = agent_client_for(awaiting_staff.actor)
    agent.post("/api/agent/tool-calls", {"name": "refund_order", "arguments": "=HYPERLINK(1)"}, format="json")
    response = export(reviewer_client, "jsonl")
    assert response["Content-Type"].startswith("application/x-ndjson")
    records = [json.loads(line) for line in streamed(response).splitlines()]
    assert len(records) == AuditRecord.objects.count()
    assert set(records[0]) == set(AUDIT_EXPORT_FIELDS)
    invalid = next(r for r in records if r["event"] == "proposal_invalid")
    assert invalid["raw_arguments"] == "=HYPERLINK(1)"
    confirmed = next(r for r in records if r["event"] == "confirmed")
    assert confirmed["approval_basis"]["digest"] == awaiting_staff.digest
    assert confirmed["result"] == {"status": "awaiting_staff"}


def test_an_empty_range_exports_only_the_header_and_a_bad_range_is_a_400(awaiting_staff, reviewer_client):
    past = timezone.now() - timedelta(days=10)
    body = streamed(export(reviewer_client, "csv", start=past, end=past + timedelta(hours=1)))
    assert body.strip() == ",".join(f'"{name}"' for name in AUDIT_EXPORT_FIELDS)  # every cell quoted
    response = export(reviewer_client, "csv", start=timezone.now(), end=past)
    assert response.status_code == 400
    assert "The end must be after the start." in response.content.decode()


def test_the_export_needs_its_own_permission(awaiting_staff, reviewer):
    from django.contrib.auth.models import Permission

    reviewer.groups.first().permissions.remove(Permission.objects.get(codename="export_auditrecord"))
    client = logged_in(reviewer)
    assert client.get("/console/").status_code == 200
    assert client.get("/console/audit/").status_code == 403
    assert export(client, "csv").status_code == 403


def test_staff_download_a_previews_audit_receipt(reviewer_client, awaiting_staff, tmp_path):
    from io import StringIO

    from django.core.management import call_command

    from approvals.audit.log import receipt_check
    from approvals.audit.seal import public_key

    response = reviewer_client.get(f"/console/previews/{awaiting_staff.pk}/receipt")
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="audit-receipt-{awaiting_staff.pk}.json"'
    receipt = json.loads(response.content)
    events = [entry["record"]["event"] for entry in receipt["records"]]
    stored = AuditRecord.objects.filter(preview=awaiting_staff).order_by("id").values_list("event", flat=True)
    assert events == list(stored)
    assert receipt_check(receipt, public_key()).valid
    path = tmp_path / "receipt.json"
    path.write_bytes(response.content)
    out = StringIO()
    call_command("verify_receipt", str(path), stdout=out)  # the configured key's public half by default
    assert "Receipt valid" in out.getvalue()
    page = reviewer_client.get(f"/console/previews/{awaiting_staff.pk}/").content.decode()
    assert f"/console/previews/{awaiting_staff.pk}/receipt" in page


def test_the_timeline_sentences_use_words_not_enum_names(
    awaiting_staff, reviewer, reviewer_client, django_capture_on_commit_callbacks
):
    """Issue 37: "Execution Started. Execution Started." and "it waits: awaiting customer"."""
    import re

    with django_capture_on_commit_callbacks(execute=True):
        approve(reviewer_client, awaiting_staff)
    page = reviewer_client.get(f"/console/previews/{awaiting_staff.pk}/audit/").content.decode()
    sentences = [text(s) for s in re.findall(r'<p class="sentence">(.*?)</p>', page, re.S)]
    proposed = next(s for s in sentences if " proposed it" in s)
    assert proposed.endswith("proposed it; it waits for the customer's confirmation.")
    assert "The worker started attempt 1." in sentences
    for sentence in sentences:
        assert not re.search(r"\b(?!agt_)[a-z]+_[a-z_]+\b", sentence), sentence  # no status or event codes
        label = re.sub(r"\.$", "", sentence)
        assert label not in {e.label for e in AuditEvent}, sentence
