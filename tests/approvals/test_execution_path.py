"""The execution path reads and writes each row once per step: step 1's checks (the order, the
approvals) are handed on to steps 2 and 3 instead of read again, and a run that resumes a started
execution reads them itself."""

from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.core.errors import TransientExecutionError
from approvals.core.services import preview_approve, preview_execute
from approvals.models import ApprovalRole, AuditRecord, Preview, PreviewStatus
from refunds.gateways import LocalGateway
from refunds.models import LocalGatewayRefund, Order, Refund
from tests.conftest import events, propose


def approved_preview(agent, person, capture, amount_minor=500) -> Preview:
    response = propose(agent, order_id="o-12", amount_minor=amount_minor, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    with capture(execute=False):
        preview_approve(preview_id=preview.pk, approver=person, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    return preview


def statements_on(table: str, queries: list[dict]) -> list[str]:
    return [q["sql"] for q in queries if f'"{table}"' in q["sql"]]


def test_the_order_and_the_approvals_are_read_once_per_locked_step(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = approved_preview(alice_agent, alice, django_capture_on_commit_callbacks)

    with CaptureQueriesContext(connection) as queries:
        assert preview_execute(preview_id=preview.pk).status == PreviewStatus.EXECUTED

    order_reads = [sql for sql in statements_on("refunds_order", queries) if sql.startswith("SELECT")]
    assert len(order_reads) == 2  # locked in step 1 and in step 3; the payment reference is step 1's
    assert len(statements_on("approvals_approval", queries)) == 1  # checked in step 1, recorded in step 3
    executed = AuditRecord.objects.get(preview=preview, event="executed")
    approval = preview.approvals.get()
    assert executed.approval_basis == {
        "customer": [{"approver": alice.pk, "digest": preview.digest, "basis": approval.basis}]
    }
    assert LocalGatewayRefund.objects.get().payment_ref == o12.payment_ref


@pytest.mark.postgres
def test_an_execution_takes_at_most_twenty_one_statements(alice, o12, alice_agent, django_capture_on_commit_callbacks):
    """Three transactions (check and reserve, the provider's remainder and the gateway's insert and read,
    record); each audit append is one call. The local gateway's remainder is one read of its own refunds,
    and it inserts with the ORM's ON CONFLICT DO NOTHING, which does not say whether the row went in, so it
    reads the row stored under the key.
    Each locked step reads the execution with its preview in one statement; an attempt that starts leaves
    the approved preview's row alone (its status does not change); a session without a webhook URL is not
    asked for it after the commit. A recording that fails rolls the step back and keeps the effect on the
    execution in a transaction of its own. (Here, inside the test's transaction, each step's transaction is
    a savepoint: its SAVEPOINT and RELEASE are counted.)"""
    preview = approved_preview(alice_agent, alice, django_capture_on_commit_callbacks)

    with CaptureQueriesContext(connection) as queries:
        preview_execute(preview_id=preview.pk)

    assert len(queries) <= 21, "\n".join(q["sql"][:100] for q in queries)


@pytest.mark.postgres
def test_the_benchmarks_state_machine_floor_sends_an_executions_statements(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    """bench/commit_floor_state_machine.sql is the commit pipeline's floor only while it sends what an
    execution sends: the same statements in the same order, and the executor's two locked steps as its
    transactions (inside the test's transaction they are savepoints; the local gateway's own transaction,
    a provider's in the script, is not one here)."""
    from bench.run import floor_statements

    preview = approved_preview(alice_agent, alice, django_capture_on_commit_callbacks)
    with CaptureQueriesContext(connection) as queries:
        assert preview_execute(preview_id=preview.pk).status == PreviewStatus.EXECUTED

    def word(sql: str) -> str:
        if sql.startswith("SAVEPOINT"):
            return "BEGIN"
        if sql.startswith("RELEASE SAVEPOINT"):
            return "COMMIT"
        return sql.split()[0].upper()

    sent = [word(q["sql"]) for q in queries.captured_queries]
    script = floor_statements()
    listing = "\n".join(q["sql"][:100] for q in queries.captured_queries)
    control = ("BEGIN", "COMMIT")
    assert [w for w in sent if w not in control] == [w for w in script if w not in control], listing
    assert sent.count("BEGIN") == 2 and script.count("BEGIN") == 3
    assert len(sent) == 21 and len(script) == 23


def test_a_resumed_execution_reads_the_order_and_the_approvals_itself(
    alice, o12, alice_agent, django_capture_on_commit_callbacks
):
    preview = approved_preview(alice_agent, alice, django_capture_on_commit_callbacks)
    with (
        mock.patch.object(LocalGateway, "refund", side_effect=TransientExecutionError("time-out")),
        pytest.raises(TransientExecutionError) as timed_out,
    ):
        preview_execute(preview_id=preview.pk)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.APPROVED and preview.execution.outcome == "in_progress"

    token = timed_out.value.fencing_token
    assert preview_execute(preview_id=preview.pk, fencing_token=token).status == PreviewStatus.EXECUTED

    assert LocalGatewayRefund.objects.get().payment_ref == o12.payment_ref
    assert Refund.objects.get().preview_id == preview.pk
    executed = AuditRecord.objects.get(preview=preview, event="executed")
    assert set(executed.approval_basis) == {"customer"}
    assert executed.approval_basis["customer"][0]["approver"] == alice.pk
    # The second attempt looked the refund up, found none, checked everything again and paid.
    assert events(preview) == ["proposed", "confirmed", "execution_started", "execution_started", "executed"]
    assert Order.objects.get(pk=o12.pk).refunded_minor == 500


def test_the_local_gateway_asks_for_a_retry_when_its_refund_id_is_taken(o12):
    LocalGatewayRefund.objects.create(
        idempotency_key="refund:other", refund_id="lr_" + "0" * 24, payment_ref="pi_x", amount_minor=1, currency="EUR"
    )

    asked = {"payment_ref": "pi_o-12", "amount_minor": 500, "currency": "EUR", "idempotency_key": "refund:new"}
    with (
        mock.patch("refunds.gateways.secrets.token_hex", return_value="0" * 24),
        pytest.raises(TransientExecutionError),
    ):
        LocalGateway().refund(**asked)

    assert not LocalGatewayRefund.objects.filter(idempotency_key="refund:new").exists()
    assert LocalGateway().refund(**asked) == LocalGateway().refund(**asked)  # the retry pays, once
