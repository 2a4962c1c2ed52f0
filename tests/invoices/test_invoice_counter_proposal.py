"""An invoice approver sends the invoice to a known billing contact instead of an unknown recipient."""

import pytest

from approvals.core.counter import preview_counter_propose
from approvals.core.errors import DecisionError
from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, Preview, PreviewStatus
from invoices.models import Delivery
from tests.console.conftest import counter_confirmed

from .test_invoice_console import _invoice_approver, _proposed_send


def test_the_unknown_recipient_is_flagged_and_replaced_by_a_known_contact(
    client, alice, inv17, smtp_server, django_capture_on_commit_callbacks
):
    preview = _proposed_send(alice)  # accounts@example.test is not a contact of INV-17
    ivy, ian = _invoice_approver("ivy"), _invoice_approver("ian")
    client.force_login(ivy)
    page = client.get(f"/console/previews/{preview.pk}/").content.decode()
    assert 'data-flag="unknown_recipient"' in page
    assert '<option value="billing@example.test">' in page  # the known contacts are the only choices

    with pytest.raises(DecisionError) as refused:
        preview_counter_propose(
            preview_id=preview.pk, reviewer=ivy, digest=preview.digest, values={"recipient": "other@example.test"}
        )
    assert refused.value.code == "recipient_not_known_contact"

    response = counter_confirmed(client, preview, {"recipient": "billing@example.test"})
    new = Preview.objects.get(supersedes=preview)
    assert response.status_code == 302
    assert new.payload["recipient"] == "billing@example.test"
    assert (
        new.status == PreviewStatus.AWAITING_STAFF and new.proposed_by_id == ivy.pk and new.origin == "counter_proposal"
    )
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.SUPERSEDED

    # The author's own approval is refused; another approver's sends it to the contact.
    with pytest.raises(DecisionError) as refused:
        preview_approve(preview_id=new.pk, approver=ivy, role=ApprovalRole.STAFF, digest=new.digest)
    assert refused.value.code == "counter_author"
    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=new.pk, approver=ian, role=ApprovalRole.STAFF, digest=new.digest)
    new.refresh_from_db()
    assert new.status == PreviewStatus.EXECUTED
    assert Delivery.objects.get().recipients == ["billing@example.test"]
    assert [m["rcpt_tos"] for m in smtp_server.messages] == [["billing@example.test"]]


def test_the_queue_finds_an_invoice_send_by_its_recipient(client, alice, inv17):
    preview = _proposed_send(alice, recipient="accounts@example.test")
    client.force_login(_invoice_approver())
    assert str(preview.pk) in client.get("/console/?q=accounts@example").content.decode()
    assert str(preview.pk) not in client.get("/console/?q=billing@example").content.decode()
