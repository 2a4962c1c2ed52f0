"""The customer's own questions: the order's total and what remains, the deadline in words and in
their timezone, no internal words, decline with a reason, out-of-date explained, the waiting page's
status endpoint, and the list of their requests."""

import json
import re

import pytest
from django.test import Client

from approvals.models import AuditRecord, Preview, PreviewStatus
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory


def make(agent, order_id, amount_minor, reason="damaged"):
    response = propose(agent, order_id=order_id, amount_minor=amount_minor, reason=reason)
    assert response.status_code == 201, response.json()
    return Preview.objects.get(pk=response.json()["preview"]["id"])


def main(response) -> str:
    """The page's own content (its HTML inside <main>)."""
    return response.content.decode().split('<main id="main"', 1)[1].split("</main>", 1)[0]


def words(html: str) -> str:
    """What a person reads: the text, without tags and their attributes (addresses, classes)."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split()).lower()


@pytest.fixture
def alice_client(alice):
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def order(alice):
    return OrderFactory(number="o-40", customer=alice, currency="EUR", total_minor=8000, refunded_minor=1000)


def test_the_page_answers_what_the_customer_asks(alice_client, alice_agent, order):
    preview = make(alice_agent, "o-40", 2500)
    page = main(alice_client.get(f"/previews/{preview.pk}/"))
    assert re.search(r"<dt>Order total</dt><dd>€80.00</dd>", page)
    assert re.search(r"<dt>Refunded before</dt><dd>€10.00</dd>", page)
    assert re.search(r"<dt>Left to refund after this</dt><dd>€45.00</dd>", page)
    assert re.search(r"Confirm within</dt><dd><span id=\"deadline-words\"[^>]*>in 1[45]\s+minutes", page)
    assert "data-localtime" in page
    for word in ("fingerprint", "preview", "digest", "awaiting", "superseded", "staff"):
        assert word not in words(page), word


def test_decline_with_a_reason_reaches_the_agent_and_the_console(alice_client, alice, alice_agent, order):
    from tests.console.conftest import logged_in, make_reviewer

    preview = make(alice_agent, "o-40", 2500)
    response = alice_client.post(
        f"/previews/{preview.pk}/decline", {"digest": preview.digest, "reason": "I found the parcel after all"}
    )
    assert response.status_code == 302
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.DECLINED
    record = AuditRecord.objects.get(preview=preview, event="declined")
    assert record.result["note"] == "I found the parcel after all"

    # The agent reads the note in its own field; the server's words never carry it (issue 30).
    agent_view = alice_agent.get(f"/api/agent/previews/{preview.pk}").json()
    assert agent_view["customer_note"] == "I found the parcel after all"
    assert "I found the parcel after all" not in agent_view["message"]
    assert agent_view["preview"]["failure"]["reason"] == "The customer declined."

    reviewer = make_reviewer("rita")
    console = logged_in(reviewer).get(f"/console/previews/{preview.pk}/").content.decode()
    assert "The customer wrote: “I found the parcel after all”" in console

    # A reason is optional.
    second = make(alice_agent, "o-40", 2600)
    alice_client.post(f"/previews/{second.pk}/decline", {"digest": second.digest})
    second.refresh_from_db()
    assert (second.status, second.failure_reason) == (PreviewStatus.DECLINED, "The customer declined.")


def test_a_request_gone_out_of_date_is_explained(alice_client, alice_agent, order, django_capture_on_commit_callbacks):
    first, second = make(alice_agent, "o-40", 2500), make(alice_agent, "o-40", 1500)
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post(f"/previews/{first.pk}/confirm", {"digest": first.digest})
    order.refresh_from_db()
    assert order.refunded_minor == 3500  # the first refund completed; the order changed

    response = alice_client.post(f"/previews/{second.pk}/confirm", {"digest": second.digest})
    assert response.status_code == 409
    page = main(response)
    assert "Your order changed after this request was made" in page
    assert "Ask the assistant for a new request" in page
    assert "preview" not in words(page)
    again = main(alice_client.get(f"/previews/{second.pk}/"))
    assert "another refund on it was completed" in again


def test_the_waiting_page_polls_a_status_endpoint_and_works_without_javascript(
    alice_client, alice, alice_agent, settings, django_capture_on_commit_callbacks
):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 1000}
    OrderFactory(number="o-41", customer=alice, currency="EUR", total_minor=8000)
    preview = make(alice_agent, "o-41", 2500)
    alice_client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})
    page = alice_client.get(f"/previews/{preview.pk}/").content.decode()
    assert '<noscript><meta http-equiv="refresh" content="30"></noscript>' in page
    assert f'data-poll-url="/previews/{preview.pk}/status"' in page and 'data-poll-seconds="3"' in page
    assert "/static/js/status.js" in page

    status = alice_client.get(f"/previews/{preview.pk}/status")
    assert status.status_code == 200 and status["Cache-Control"] == "no-store"
    assert json.loads(status.content) == {
        "status": "awaiting_staff",
        "state": "awaiting_staff",
        "title": "Waiting for staff review",
        "text": "Our support team checks this request before it is carried out.",
        "waiting": True,
    }
    # Someone else's request is as if it did not exist; an anonymous visitor is sent to log in.
    bob_client = Client()
    from tests.factories import UserFactory

    bob_client.force_login(UserFactory(username="bobby"))
    assert bob_client.get(f"/previews/{preview.pk}/status").status_code == 404
    assert Client().get(f"/previews/{preview.pk}/status").status_code == 302


def test_my_requests_lists_every_action_of_mine_only(alice_client, alice, bob, alice_agent, order):
    from invoices.models import Invoice, InvoiceContact, InvoiceLine

    refund = make(alice_agent, "o-40", 2500)
    invoice = Invoice.objects.create(number="INV-9", customer=alice, currency="EUR", status="issued")
    InvoiceLine.objects.create(invoice=invoice, position=1, description="Work", quantity=1, unit_minor=500)
    InvoiceContact.objects.create(invoice=invoice, email="billing@example.test")
    sends = agent_client_for(alice, tools=("send_invoice",))
    response = sends.post(
        "/api/agent/tool-calls",
        {"name": "send_invoice", "arguments": json.dumps({"invoice_id": "INV-9", "recipient": "billing@example.test"})},
        format="json",
    )
    assert response.status_code == 201
    OrderFactory(number="o-99", customer=bob, currency="EUR", total_minor=8000)
    bobs = make(agent_client_for(bob), "o-99", 100)

    page = main(alice_client.get("/previews/"))
    assert "Refund €25.00 on order o-40" in page and "Waiting for you" in page
    assert "Send invoice INV-9 to billing@example.test" in page
    assert "o-99" not in page
    assert f"/previews/{refund.pk}/" in alice_client.get("/previews/").content.decode()
    assert str(bobs.pk) not in alice_client.get("/previews/").content.decode()


def test_staff_do_not_see_my_orders(db):
    from tests.console.conftest import logged_in, make_reviewer

    page = logged_in(make_reviewer("rita")).get("/console/").content.decode()
    assert ">My orders<" not in page
    assert ">My requests<" in page


def test_a_request_not_carried_out_shows_what_stands_now(alice_client, alice_agent, order):
    preview = make(alice_agent, "o-40", 2500)
    alice_client.post(f"/previews/{preview.pk}/decline", {"digest": preview.digest})
    page = main(alice_client.get(f"/previews/{preview.pk}/"))
    assert re.search(r"<dt>Left to refund</dt><dd>€70.00</dd>", page)
    assert "after this" not in page
