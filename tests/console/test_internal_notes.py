"""Internal notes: staff write them on a preview for each other; they are audited (by digest), shown
on the console's detail page, and never on the customer's page nor in the agent API."""

from approvals.core.digests import digest_of
from approvals.models import AuditEvent, AuditRecord, InternalNote
from tests.conftest import agent_client_for

from .conftest import confirmed, logged_in, proposed
from .test_detail import section

NOTE = "Called the courier: parcel 4471 was left at the neighbour's, customer disputes it."


def test_a_note_is_kept_audited_and_shown_to_staff_only(big_order, alice, reviewer, second_reviewer, client):
    agent = agent_client_for(alice)
    preview = confirmed(proposed(alice, big_order.number, 12000))

    response = logged_in(reviewer).post(f"/console/previews/{preview.pk}/notes", {"body": NOTE})

    assert response.status_code == 302
    assert response["Location"] == f"/console/previews/{preview.pk}/#internal-notes"
    note = InternalNote.objects.get()
    assert (note.preview_id, note.author_id, note.body) == (preview.pk, reviewer.pk, NOTE)
    record = AuditRecord.objects.get(event=AuditEvent.INTERNAL_NOTE_ADDED)
    assert record.preview_id == preview.pk and record.actor_id == reviewer.pk
    assert record.result == {"note_id": note.pk, "body_digest": digest_of(NOTE), "length": len(NOTE)}
    assert NOTE not in str(record.result)

    staff_page = logged_in(second_reviewer).get(f"/console/previews/{preview.pk}/").content.decode()
    notes = section(staff_page, "notes-title")
    assert NOTE in notes and "rita" in notes

    client.force_login(alice)
    customer_page = client.get(f"/previews/{preview.pk}/")
    assert customer_page.status_code == 200
    assert "parcel 4471" not in customer_page.content.decode()
    api = agent.get(f"/api/agent/previews/{preview.pk}")
    assert api.status_code == 200
    assert "parcel 4471" not in api.content.decode()


def test_an_empty_note_is_refused_and_nothing_is_kept(big_order, alice, reviewer):
    preview = confirmed(proposed(alice, big_order.number, 12000))
    response = logged_in(reviewer).post(f"/console/previews/{preview.pk}/notes", {"body": "   "})
    assert response.status_code == 400
    assert not InternalNote.objects.exists()
    assert not AuditRecord.objects.filter(event=AuditEvent.INTERNAL_NOTE_ADDED).exists()


def test_staff_who_may_not_review_the_action_cannot_write_a_note(big_order, alice, staff_without_permission):
    preview = confirmed(proposed(alice, big_order.number, 12000))
    response = logged_in(staff_without_permission).post(f"/console/previews/{preview.pk}/notes", {"body": NOTE})
    assert response.status_code in (403, 404)
    assert not InternalNote.objects.exists()
