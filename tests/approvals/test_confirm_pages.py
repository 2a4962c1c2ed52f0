"""The customer's pages: the exact preview, Confirm/Decline with CSRF and digest, the real status."""

import re
from datetime import UTC, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from approvals.models import Approval, AuditRecord, Preview, PreviewStatus
from refunds.models import LocalGatewayRefund, Order, OrderStatus, Refund
from tests.conftest import execution_callbacks, propose
from tests.factories import OrderFactory

PASSWORD = "pass-for-tests"  # tests.factories.UserFactory


def make_preview(agent, order_id="o-12", amount_minor=500, reason="damaged") -> Preview:
    response = propose(agent, order_id=order_id, amount_minor=amount_minor, reason=reason)
    assert response.status_code == 201, response.json()
    return Preview.objects.get(pk=response.json()["preview"]["id"])


def page_url(preview) -> str:
    return f"/previews/{preview.pk}/"


def html(response) -> str:
    return response.content.decode()


def text_of(fragment: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", fragment).split())


def status_box(response) -> str:
    """The text of the page's role=status box, where the real state is told."""
    match = re.search(r'<div class="status[^"]*" role="status"[^>]*>(.*?)</div>', html(response), re.S)
    assert match, html(response)
    return text_of(match.group(1))


@pytest.fixture(autouse=True)
def no_login_lockout(settings):
    """Failed-login counters live in the cache, which is Redis when REDIS_URL is set and outlives a run."""
    settings.LOGIN_FAILURE_LIMIT = 10**6


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def assert_not_decided(preview, order):
    preview.refresh_from_db()
    order.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER
    assert Approval.objects.count() == 0
    assert Refund.objects.count() == 0
    assert LocalGatewayRefund.objects.count() == 0
    assert (order.refunded_minor, order.version) == (0, 1)


# What the customer sees ----------------------------------------------------------------------


def test_the_page_shows_the_exact_preview_and_both_forms(alice_client, o12, alice_agent):
    preview = make_preview(alice_agent)

    response = alice_client.get(page_url(preview))

    assert response.status_code == 200
    page = html(response)
    assert "Refund €5.00 on order o-12" in page
    assert re.search(r"<dt>Order</dt><dd>o-12</dd>", page)
    assert re.search(r"<dt>Refund amount</dt><dd>€5.00</dd>", page)
    assert re.search(r"<dt>Currency</dt><dd>EUR</dd>", page)
    assert re.search(r"<dt>Reason</dt><dd>Arrived damaged</dd>", page)
    # The deadline in words, and as a time the page's script shows in the customer's own timezone
    # (UTC, labelled, without JavaScript).
    assert re.search(r'<span id="deadline-words"[^>]*>in 1[45]\s+minutes', page)
    utc = preview.expires_at.astimezone(UTC)
    assert f'<time datetime="{utc:%Y-%m-%dT%H:%M:%SZ}" data-localtime>{utc:%-d %b %Y, %H:%M} UTC</time>' in page
    assert "Waiting for your confirmation" in status_box(response)
    assert "cannot be undone" in page  # what happens on confirm
    for action in ("confirm", "decline"):
        form = re.search(rf'<form method="post" action="/previews/{preview.pk}/{action}">(.*?)</form>', page, re.S)
        assert form, f"no {action} form"
        assert 'name="csrfmiddlewaretoken"' in form.group(1)
        assert f'name="digest" value="{preview.digest}"' in form.group(1)
    assert "$" not in page and "USD" not in page


def test_a_jpy_amount_has_no_decimals(alice_client, alice, alice_agent):
    OrderFactory(number="o-30", customer=alice, currency="JPY", total_minor=1000)
    preview = make_preview(alice_agent, order_id="o-30", amount_minor=500)

    response = alice_client.get(page_url(preview))

    assert response.status_code == 200
    page = html(response)
    assert re.search(r"<dt>Refund amount</dt><dd>¥500</dd>", page)
    assert "Refund ¥500 on order o-30" in page
    assert "¥500.00" not in page and "¥5.00" not in page


def test_another_user_gets_404_and_cannot_decide(client, bob, o12, alice_agent):
    preview = make_preview(alice_agent)
    client.force_login(bob)

    assert client.get(page_url(preview)).status_code == 404
    assert client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest}).status_code == 404
    assert client.post(f"/previews/{preview.pk}/decline", {"digest": preview.digest}).status_code == 404

    assert_not_decided(preview, o12)
    assert not AuditRecord.objects.filter(actor=bob).exists()


def test_an_unknown_preview_is_404(alice_client):
    assert alice_client.get("/previews/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_anonymous_is_sent_to_login_and_back(client, alice, o12, alice_agent):
    preview = make_preview(alice_agent)
    path = page_url(preview)

    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={path}"

    response = client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert_not_decided(preview, o12)

    login = client.get(f"/accounts/login/?next={path}")
    assert login.status_code == 200
    assert f'name="next" value="{path}"' in html(login)

    response = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD, "next": path}, follow=True)

    assert response.redirect_chain[-1] == (path, 302)
    assert response.status_code == 200
    assert re.search(r"<dt>Refund amount</dt><dd>€5.00</dd>", html(response))


def test_wrong_password_stays_on_login(client, alice, o12, alice_agent):
    preview = make_preview(alice_agent)
    response = client.post("/accounts/login/", {"username": "alice", "password": "wrong", "next": page_url(preview)})
    assert response.status_code == 200
    assert re.search(r'role="alert"[^>]*>[^<]*(correct username and password|did not match)', html(response))
    assert 'name="password"' in html(response)
    assert "_auth_user_id" not in client.session


# Confirm and decline -------------------------------------------------------------------------


def test_confirm_without_a_csrf_token_is_forbidden(alice, o12, alice_agent, django_capture_on_commit_callbacks):
    preview = make_preview(alice_agent)
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(alice)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = csrf_client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})

    assert response.status_code == 403
    assert execution_callbacks(callbacks) == []
    assert_not_decided(preview, o12)

    # The page's own form, token included, is accepted.
    page = html(csrf_client.get(page_url(preview)))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = csrf_client.post(
            f"/previews/{preview.pk}/confirm", {"digest": preview.digest, "csrfmiddlewaretoken": token}
        )
    assert response.status_code == 302
    assert len(execution_callbacks(callbacks)) == 1
    assert Approval.objects.get().approver == alice


def test_a_wrong_digest_asks_to_review_again(alice_client, o12, alice_agent, django_capture_on_commit_callbacks):
    preview = make_preview(alice_agent)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = alice_client.post(f"/previews/{preview.pk}/confirm", {"digest": "0" * 64})

    assert response.status_code == 409
    assert execution_callbacks(callbacks) == []
    page = html(response)
    assert re.search(r'role="alert"[^>]*>[^<]*Review it again', page)
    # The page shows the preview as it is now, so the customer can review it and decide again.
    assert f'name="digest" value="{preview.digest}"' in page
    assert_not_decided(preview, o12)
    assert AuditRecord.objects.get(event="decision_refused").result["error"]["code"] == "digest_mismatch"


def test_an_incomplete_form_is_refused(alice_client, o12, alice_agent):
    preview = make_preview(alice_agent)

    response = alice_client.post(f"/previews/{preview.pk}/confirm", {})

    assert response.status_code == 400
    assert "The form was incomplete" in html(response)
    assert_not_decided(preview, o12)


def test_the_page_tells_processing_until_the_worker_executed_then_completed(
    alice_client, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = make_preview(alice_agent)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = alice_client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})
    assert response.status_code == 302
    assert response["Location"] == page_url(preview)
    assert len(execution_callbacks(callbacks)) == 1

    processing = alice_client.get(page_url(preview))
    assert processing.status_code == 200
    box = status_box(processing)
    assert "Processing" in box
    assert "Completed" not in html(processing)
    assert 'http-equiv="refresh"' in html(processing)
    assert 'name="digest"' not in html(processing), "no second confirmation form"
    assert Refund.objects.count() == 0

    execution_callbacks(callbacks)[0]()  # the worker runs

    refund = Refund.objects.get()
    completed = alice_client.get(page_url(preview))
    box = status_box(completed)
    assert box.startswith("Completed.")
    assert f"Refunded €5.00 on order o-12 (refund reference {refund.gateway_refund_id})" in box
    assert refund.gateway_refund_id == LocalGatewayRefund.objects.get().refund_id
    assert "Processing" not in html(completed)
    assert 'http-equiv="refresh"' not in html(completed)


def test_a_failed_execution_shows_the_reason(alice_client, o12, alice_agent, django_capture_on_commit_callbacks):
    preview = make_preview(alice_agent)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        alice_client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})
    Order.objects.filter(pk=o12.pk).update(status=OrderStatus.CANCELLED)
    execution_callbacks(callbacks)[0]()

    response = alice_client.get(page_url(preview))

    box = status_box(response)
    assert box.startswith("Not carried out. Nothing was done.")
    assert "Nothing was done" in box
    assert "Order o-12 is cancelled; only delivered orders can be refunded." in box
    assert "Completed" not in html(response)
    assert Refund.objects.count() == 0


def test_decline(alice_client, o12, alice_agent, django_capture_on_commit_callbacks):
    preview = make_preview(alice_agent)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = alice_client.post(f"/previews/{preview.pk}/decline", {"digest": preview.digest})

    assert response.status_code == 302
    assert execution_callbacks(callbacks) == []
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.DECLINED
    assert AuditRecord.objects.filter(preview=preview, event="declined").count() == 1
    assert Approval.objects.count() == 0
    assert Refund.objects.count() == 0
    page = alice_client.get(page_url(preview))
    assert status_box(page).startswith("Declined.")
    assert 'name="digest"' not in html(page)

    # Confirming afterwards is refused with a page, and still nothing happens.
    response = alice_client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})
    assert response.status_code == 409
    assert Approval.objects.count() == 0


def test_an_expired_preview_shows_expired_without_forms(alice_client, o12, alice_agent):
    preview = make_preview(alice_agent)
    Preview.objects.filter(pk=preview.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    response = alice_client.get(page_url(preview))

    assert status_box(response).startswith("Expired.")
    assert 'name="digest"' not in html(response)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXPIRED


# Orders page ---------------------------------------------------------------------------------


def test_orders_page_lists_own_orders_remaining_and_refunds(
    client, alice, bob, o12, o17, alice_agent, django_capture_on_commit_callbacks
):
    done = make_preview(alice_agent, amount_minor=300)
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/previews/{done.pk}/confirm", {"digest": done.digest})
    refund = Refund.objects.get()
    pending = make_preview(alice_agent, amount_minor=200)

    response = client.get("/orders/")

    assert response.status_code == 200
    page = html(response)
    row = re.search(r"<tr[^>]*>\s*<th scope=\"row\"[^>]*>o-12</th>(.*?)</tr>", page, re.S)
    assert row, page
    cells = [text_of(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]
    # placed, status, total, refunded, refundable, refunds
    assert cells[2:5] == ["€10.00", "€3.00", "€7.00"]
    assert "€3.00" in cells[5] and refund.gateway_refund_id in cells[5]
    assert f'href="/previews/{pending.pk}/"' in page  # the request still waiting for her
    assert f'href="/previews/{done.pk}/"' not in page
    assert "o-17" not in page and "$" not in page

    client.force_login(bob)
    page = html(client.get("/orders/"))
    assert "o-17" in page and "$10.00" in page
    assert "o-12" not in page and refund.gateway_refund_id not in page


def test_orders_page_needs_login(client):
    response = client.get("/orders/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/orders/"


def test_orders_page_names_open_requests_in_the_customers_words(client, alice, o12, alice_agent, settings):
    """Issue 37: the customer's /orders/ said "Waiting for the customer", the staff's wording."""
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 100}
    waiting_for_her = make_preview(alice_agent, amount_minor=200)
    for_staff = make_preview(alice_agent, amount_minor=300)
    client.force_login(alice)
    client.post(f"/previews/{for_staff.pk}/confirm", {"digest": for_staff.digest})
    assert Preview.objects.get(pk=for_staff.pk).status == PreviewStatus.AWAITING_STAFF

    page = html(client.get("/orders/"))

    items = {text_of(item) for item in re.findall(r"<li>(.*?)</li>", page, re.S)}
    assert "Refund €2.00 on order o-12 Waiting for your confirmation" in items
    assert "Refund €3.00 on order o-12 Waiting for staff review" in items
    assert "Waiting for the customer" not in page
    assert f'href="/previews/{waiting_for_her.pk}/"' in page


def test_the_last_minute_is_less_than_a_minute_not_zero_minutes(alice_client, o12, alice_agent):
    """Issue 37: "Confirm within in 0 minutes" near the end."""
    preview = make_preview(alice_agent)
    Preview.objects.filter(pk=preview.pk).update(expires_at=timezone.now() + timedelta(seconds=40))
    page = html(alice_client.get(page_url(preview)))
    deadline = re.search(r'<span id="deadline-words" data-expires="([^"]+)">(.*?)</span>', page)
    assert deadline and deadline.group(2) == "in less than a minute"
    assert deadline.group(1).startswith(f"{timezone.now():%Y-%m-%d}")  # the time the page's script counts to


def test_a_late_confirmation_is_told_once(alice_client, o12, alice_agent):
    """Issue 37: a click after the deadline showed two banners (the refusal, and the status box)."""
    preview = make_preview(alice_agent)
    Preview.objects.filter(pk=preview.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    response = alice_client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})

    assert response.status_code == 409
    page = html(response)
    assert 'role="alert"' not in page
    assert page.count("in time; nothing was done") == 1
    assert "Expired. This request was not confirmed in time; nothing was done." in status_box(response)
    assert Preview.objects.get(pk=preview.pk).status == PreviewStatus.EXPIRED
    assert not Refund.objects.exists()
