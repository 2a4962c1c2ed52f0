"""Console fixtures: reviewers, staff without the permission, and previews waiting for staff."""

import re

import pytest
from django.contrib.auth.models import Group
from django.http import HttpResponse
from django.test import Client

from approvals.core.services import preview_approve
from approvals.models import ApprovalRole, Preview, PreviewStatus
from invoices.permissions import BILLING
from refunds.permissions import REFUND_REVIEWERS
from tests.conftest import agent_client_for, propose
from tests.factories import OrderFactory, StaffFactory, UserFactory

THRESHOLD = 10000  # EUR and USD, minor units: above it a refund also needs staff


@pytest.fixture(autouse=True)
def _thresholds(settings):
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": THRESHOLD, "USD": THRESHOLD}


def reviewers_group() -> Group:
    """The group refunds declares (refund_order's staff role), made with its permissions by the engine
    after migrate and again after a transactional test's flush (post_migrate)."""
    return Group.objects.get(name=REFUND_REVIEWERS)


def make_reviewer(username: str):
    user = StaffFactory(username=username)
    user.groups.add(reviewers_group())
    return user


@pytest.fixture
def reviewer(db):
    return make_reviewer("rita")


@pytest.fixture
def second_reviewer(db):
    return make_reviewer("ron")


@pytest.fixture
def staff_without_permission(db):
    user = StaffFactory(username="bill")
    group, _ = Group.objects.get_or_create(name=BILLING)
    user.groups.add(group)
    return user


@pytest.fixture
def customer(alice):
    return alice


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def reviewer_client(reviewer):
    return logged_in(reviewer)


@pytest.fixture
def big_order(alice):
    """Alice's delivered EUR order, large enough for refunds above the staff threshold."""
    return OrderFactory(number="o-77", customer=alice, currency="EUR", total_minor=50000)


def proposed(customer, order_number: str, amount_minor: int, reason: str = "damaged") -> Preview:
    """A preview proposed by the customer's own agent session."""
    agent = agent_client_for(customer)
    response = propose(agent, order_id=order_number, amount_minor=amount_minor, reason=reason)
    assert response.status_code == 201, response.json()
    return Preview.objects.get(pk=response.json()["preview"]["id"])


READING = re.compile(r'name="reading" value="([0-9a-f]{64})"')


def counter_read_back(client: Client, preview: Preview, values: dict[str, str], **headers: str) -> HttpResponse:
    """The first post of a counter-proposal: the console reads the change back, proposing nothing."""
    return client.post(f"/console/previews/{preview.pk}/counter", {"digest": preview.digest, **values}, **headers)


def counter_confirmed(client: Client, preview: Preview, values: dict[str, str], **headers: str) -> HttpResponse:
    """Both posts of a counter-proposal: read back, then confirmed from the confirmation page."""
    page = counter_read_back(client, preview, values, **headers)
    assert page.status_code == 200, page.content.decode()
    match = READING.search(page.content.decode())
    assert match, page.content.decode()
    data = {"digest": preview.digest, "reading": match.group(1), **values}
    return client.post(f"/console/previews/{preview.pk}/counter", data, **headers)


def confirmed(preview: Preview) -> Preview:
    """The customer confirms the exact preview; above the threshold it then waits for staff."""
    return preview_approve(
        preview_id=preview.pk, approver=preview.actor, role=ApprovalRole.CUSTOMER, digest=preview.digest
    )


@pytest.fixture
def awaiting_staff(big_order):
    preview = confirmed(proposed(big_order.customer, big_order.number, 12000))
    assert preview.status == PreviewStatus.AWAITING_STAFF
    return preview


@pytest.fixture
def other_customer(db):
    return UserFactory(username="carol")


@pytest.fixture
def failed_transient(awaiting_staff, second_reviewer, django_capture_on_commit_callbacks):
    """Approved by staff, then given up by the worker after transient errors (nothing was paid)."""
    from tests.conftest import give_up_execution

    with django_capture_on_commit_callbacks(execute=False):
        preview_approve(
            preview_id=awaiting_staff.pk,
            approver=second_reviewer,
            role=ApprovalRole.STAFF,
            digest=awaiting_staff.digest,
        )
    give_up_execution(awaiting_staff)
    assert awaiting_staff.status == PreviewStatus.NEEDS_ATTENTION
    return awaiting_staff


def bulk_previews(
    count: int,
    *,
    customer,
    order_number: str,
    status=PreviewStatus.AWAITING_STAFF,
    currency: str = "EUR",
    action: str = "refund_order",
    amount_minor: int = 12000,
    reason: str = "damaged",
    ttl=None,
) -> list[Preview]:
    """Many previews at once, straight into the table (the queue only reads them)."""
    import uuid
    from datetime import timedelta

    from django.utils import timezone

    expires = timezone.now() + (ttl or timedelta(minutes=15))
    return Preview.objects.bulk_create(
        Preview(
            action=action,
            actor=customer,
            subject_type="order",
            subject_id=order_number,
            subject_version=1,
            payload={"order_id": order_number, "amount_minor": amount_minor, "currency": currency, "reason": reason},
            amount_minor=amount_minor,
            currency=currency,
            proposal_key=uuid.uuid4().hex,
            digest=uuid.uuid4().hex * 2,
            required_approvals=["customer", "staff"],
            status=status,
            expires_at=expires,
        )
        for _ in range(count)
    )
