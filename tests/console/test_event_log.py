"""The console's event log (/console/events/): the audit records a staff member may read, newest first,
filtered by action kind, event, preview, actor and time, paged by keyset (never OFFSET)."""

import re
from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.console.selectors import auditable_records
from approvals.models import AuditEvent, AuditRecord

from .conftest import confirmed, logged_in, proposed


def rows(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-record="(\d+)"', html)]


def test_the_nav_audit_log_leads_to_the_event_log_with_the_export_beside_it(awaiting_staff, reviewer, reviewer_client):
    queue = reviewer_client.get("/console/").content.decode()
    assert '<a href="/console/events/">Audit log</a>' in queue
    assert '<a href="/console/audit/">Audit export</a>' in queue
    page = reviewer_client.get("/console/events/")
    assert page.status_code == 200
    html = page.content.decode()
    ids = rows(html)
    visible = auditable_records(user=reviewer).values_list("pk", flat=True)
    assert ids == sorted(visible, reverse=True)
    assert AuditRecord.objects.filter(event=AuditEvent.AGENT_SESSION_CREATED).exclude(pk__in=ids).exists()
    assert f'href="/console/previews/{awaiting_staff.pk}/"' in html
    assert 'href="/console/audit/"' in html


def test_filters_narrow_the_records(big_order, alice, reviewer, reviewer_client):
    first = confirmed(proposed(alice, big_order.number, 12000))
    second = confirmed(proposed(alice, big_order.number, 13000))
    logged_in(reviewer).post(f"/console/previews/{second.pk}/notes", {"body": "checked"})

    by_preview = rows(reviewer_client.get("/console/events/", {"preview": str(first.pk)}).content.decode())
    assert by_preview and set(by_preview) == set(first.audit_records.values_list("pk", flat=True))

    by_event = rows(reviewer_client.get("/console/events/", {"event": "confirmed"}).content.decode())
    assert set(by_event) == set(AuditRecord.objects.filter(event=AuditEvent.CONFIRMED).values_list("pk", flat=True))
    assert len(by_event) == 2

    by_actor = rows(reviewer_client.get("/console/events/", {"actor": "rita"}).content.decode())
    assert by_actor == [AuditRecord.objects.get(event=AuditEvent.INTERNAL_NOTE_ADDED).pk]

    by_kind = rows(reviewer_client.get("/console/events/", {"action": "refund_order"}).content.decode())
    assert len(by_kind) == AuditRecord.objects.filter(preview__action="refund_order").count()

    later = (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert rows(reviewer_client.get("/console/events/", {"start": later}).content.decode()) == []
    earlier = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert rows(reviewer_client.get("/console/events/", {"end": earlier}).content.decode()) == []

    bad = reviewer_client.get("/console/events/", {"preview": "not-a-uuid"})
    assert bad.status_code == 400


def test_pages_are_keyset_not_offset(monkeypatch, big_order, alice, reviewer, reviewer_client):
    monkeypatch.setattr("approvals.console.selectors.trail.EVENT_LOG_PAGE_SIZE", 3)
    for amount in (12000, 12100, 12200, 12300):
        confirmed(proposed(alice, big_order.number, amount))
    every = list(auditable_records(user=reviewer).order_by("-pk").values_list("pk", flat=True))
    assert len(every) > 6

    with CaptureQueriesContext(connection) as queries:
        first = reviewer_client.get("/console/events/").content.decode()
    assert rows(first) == every[:3]
    assert not any("OFFSET" in q["sql"].upper() for q in queries.captured_queries)
    older = re.search(r'<a href="\?([^"]*)" rel="next"', first)
    assert older, "no link to older records"
    second = reviewer_client.get("/console/events/?" + older.group(1).replace("&amp;", "&")).content.decode()
    assert rows(second) == every[3:6]


def test_staff_without_the_audit_permission_are_refused(staff_without_permission, awaiting_staff):
    response = logged_in(staff_without_permission).get("/console/events/")
    assert response.status_code == 403 or str(awaiting_staff.pk) not in response.content.decode()
