"""Issue 16, item 7: any subject id works in the console (detail page, audit trail of the subject)."""

import html
from urllib.parse import quote

import pytest

from approvals.models import PreviewStatus
from tests.factories import OrderFactory

from .conftest import confirmed, proposed

IDS = ["2026/0042", "%00", "a?b#c", "../../admin", "o-12/audit", "100%", "x&y=z", "ORD#4417", "a//b/"]


@pytest.mark.parametrize("number", IDS)
def test_a_preview_on_any_order_id_can_be_reviewed_and_its_audit_trail_opened(customer, reviewer_client, number):
    """Orders come from the shop's own systems as well as the import: the console must take any id."""
    OrderFactory(number=number, customer=customer, currency="EUR", total_minor=50000)
    preview = confirmed(proposed(customer, number, 20000))
    assert preview.status == PreviewStatus.AWAITING_STAFF

    detail = reviewer_client.get(f"/console/previews/{preview.pk}/")
    assert detail.status_code == 200
    page = detail.content.decode()
    link = f"/console/subjects/order/audit/?id={quote(number, safe='')}"
    assert f'href="{html.escape(link)}"' in page
    assert f"Audit trail of order {html.escape(number)}" in page

    trail = reviewer_client.get(link)
    assert trail.status_code == 200
    text = trail.content.decode()
    assert f"Audit trail of order {html.escape(number)}" in text
    assert "proposed" in text and "confirmed" in text

    timeline = reviewer_client.get(f"/console/previews/{preview.pk}/audit/")
    assert timeline.status_code == 200
    assert f'href="{html.escape(link)}"' in timeline.content.decode()


def test_the_audit_trail_needs_an_id(reviewer_client):
    assert reviewer_client.get("/console/subjects/order/audit/").status_code == 404
    assert reviewer_client.get("/console/subjects/order/audit/?id=").status_code == 404
