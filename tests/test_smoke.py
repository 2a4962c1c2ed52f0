from approvals.models import AuditRecord, Preview
from tests.conftest import propose


def test_alice_proposes_a_refund_on_o12_in_euros(alice_agent, o12):
    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["preview"]["currency"] == "EUR"
    assert body["executed"] is False
    preview = Preview.objects.get()
    assert preview.currency == "EUR"
    assert AuditRecord.objects.filter(event="proposed", preview=preview).count() == 1
