"""Passkey step-up in the one decision service: refusals by their exact code (each audited), a signed
approval kept whole (with the approval and in its audit record), and a passkey that adds to four eyes and
the quorum without replacing them. The assertions come from a software authenticator (tests/passkeys.py)."""

import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from approvals.audit.passkey_check import passkey_signature_problems
from approvals.console.review_work import BulkItem, previews_decide_many
from approvals.console.slack.deciding import ButtonValue, slack_decide
from approvals.core.errors import DecisionError
from approvals.core.passkey_challenge import step_up_challenge
from approvals.core.services import (
    Decision,
    passkey_register,
    passkey_registration_options,
    preview_approve,
    signature_document,
    step_up_options,
)
from approvals.core.services.passkeys import step_up_check
from approvals.models import (
    ApprovalRole,
    ApprovalSignature,
    AuditEvent,
    AuditRecord,
    Passkey,
    Preview,
    PreviewStatus,
    StepUpChallenge,
)
from refunds.models import Refund
from tests.factories import OrderFactory
from tests.passkeys import ORIGIN, RP_ID, SoftPasskey, with_flipped_byte

from .conftest import confirmed, proposed


@pytest.fixture(autouse=True)
def _relying_party(settings):
    settings.WEBAUTHN_RP_ID = RP_ID
    settings.WEBAUTHN_ORIGINS = [ORIGIN]
    settings.STEP_UP_THRESHOLDS = "refund_order:EUR:12000"


def enrol(person, name="Laptop", **options) -> SoftPasskey:
    """Register a software passkey for `person` through the registration service."""
    key = SoftPasskey(**options)
    creation, challenge = passkey_registration_options(person=person)
    passkey_register(person=person, name=name, credential=key.register(creation), challenge=challenge)
    return key


def signed_for(person, key: SoftPasskey, digests: list[str], **assertion_options) -> str:
    return key.assertion(step_up_options(person=person, digests=digests), **assertion_options)


def approve(preview, person, assertion=""):
    return preview_approve(
        preview_id=preview.pk,
        approver=person,
        role=ApprovalRole.STAFF,
        digest=preview.digest,
        passkey_assertion=assertion,
    )


def refused(preview, person, assertion="") -> DecisionError:
    with pytest.raises(DecisionError) as raised:
        approve(preview, person, assertion)
    return raised.value


def last_refusal(preview) -> dict:
    record = AuditRecord.objects.filter(preview=preview, event=AuditEvent.DECISION_REFUSED).latest("id")
    return record.result["error"]


def big(alice, number: str, amount: int) -> Preview:
    OrderFactory(number=number, customer=alice, currency="EUR", total_minor=50000)
    preview = confirmed(proposed(alice, number, amount))
    assert preview.status == PreviewStatus.AWAITING_STAFF
    return preview


# Refusals ----------------------------------------------------------------------------------------


def test_no_passkey_registered_is_step_up_required_and_audited(awaiting_staff, reviewer):
    error = refused(awaiting_staff, reviewer)
    assert error.code == "step_up_required"
    assert error.facts == {"has_passkey": False, "threshold_minor": 12000}
    assert error.message.startswith("This preview is for €120.00, at or above €120.00: approve it with your passkey.")
    assert "You have no passkey yet" in error.message
    assert last_refusal(awaiting_staff)["code"] == "step_up_required"
    awaiting_staff.refresh_from_db()
    assert awaiting_staff.status == PreviewStatus.AWAITING_STAFF
    assert not awaiting_staff.approvals.filter(role=ApprovalRole.STAFF).exists()


def test_a_passkey_registered_but_no_assertion_is_step_up_required(awaiting_staff, reviewer):
    enrol(reviewer)
    error = refused(awaiting_staff, reviewer)
    assert error.code == "step_up_required"
    assert error.facts["has_passkey"] is True
    assert "No passkey confirmation came with this decision" in error.message


def test_below_the_threshold_no_passkey_is_asked_for(alice, reviewer):
    preview = big(alice, "o-78", 11999)
    approve(preview, reviewer)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.APPROVED
    assert not ApprovalSignature.objects.exists()


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("another_preview", "another_preview"),
        ("bad_signature", "bad_signature"),
        ("no_user_verification", "user_not_verified"),
        ("another_origin", "wrong_origin"),
        ("another_rp_id", "wrong_rp_id"),
        ("expired", "expired"),
        ("garbage", "malformed"),
        ("not_asked_for", "unknown_challenge"),
    ],
)
def test_an_assertion_that_does_not_verify_is_step_up_invalid(alice, reviewer, awaiting_staff, how, reason):
    key = enrol(reviewer)
    other = big(alice, "o-79", 13000)
    options = step_up_options(person=reviewer, digests=[awaiting_staff.digest])
    if how == "another_preview":
        assertion = key.assertion(step_up_options(person=reviewer, digests=[other.digest]))
    elif how == "bad_signature":
        assertion = with_flipped_byte(key.assertion(options))
    elif how == "no_user_verification":
        assertion = key.assertion(options, uv=False)
    elif how == "another_origin":
        assertion = key.assertion(options, origin="https://evil.example.test")
    elif how == "another_rp_id":
        assertion = key.assertion(options, rp_id="evil.example.test")
    elif how == "expired":
        StepUpChallenge.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        assertion = key.assertion(options)
    elif how == "garbage":
        assertion = "{not json"
    else:
        assertion = key.assertion({**options, "challenge": "A" * 43})
    error = refused(awaiting_staff, reviewer, assertion)
    assert (error.code, error.facts) == ("step_up_invalid", {"reason": reason})
    assert last_refusal(awaiting_staff) == {"code": "step_up_invalid", "message": error.message, "reason": reason}
    assert error.message.endswith("Nothing was decided: confirm again with your passkey.")
    awaiting_staff.refresh_from_db()
    assert awaiting_staff.status == PreviewStatus.AWAITING_STAFF
    assert not ApprovalSignature.objects.exists()
    assert not Refund.objects.exists()


def test_another_persons_credential_is_step_up_invalid(awaiting_staff, reviewer, second_reviewer):
    enrol(reviewer)
    rons_key = enrol(second_reviewer, name="Ron's phone")
    # rita's own challenge, signed by ron's passkey
    assertion = rons_key.assertion(step_up_options(person=reviewer, digests=[awaiting_staff.digest]))
    error = refused(awaiting_staff, reviewer, assertion)
    assert (error.code, error.facts) == ("step_up_invalid", {"reason": "not_your_passkey"})


def test_another_persons_assertion_is_step_up_invalid(awaiting_staff, reviewer, second_reviewer):
    ritas_key = enrol(reviewer)
    enrol(second_reviewer, name="Ron's phone")
    assertion = signed_for(reviewer, ritas_key, [awaiting_staff.digest])
    error = refused(awaiting_staff, second_reviewer, assertion)
    assert (error.code, error.facts) == ("step_up_invalid", {"reason": "another_person"})
    # rita's assertion was not used up by ron's attempt: she approves with it
    approve(awaiting_staff, reviewer, assertion)
    assert ApprovalSignature.objects.get().approval.approver == reviewer


def test_an_assertion_counts_once_for_its_digest(awaiting_staff, reviewer):
    key = enrol(reviewer)
    assertion = signed_for(reviewer, key, [awaiting_staff.digest])
    with transaction.atomic():
        step_up_check(preview=awaiting_staff, person=reviewer, assertion=assertion)
    with pytest.raises(DecisionError) as raised, transaction.atomic():
        step_up_check(preview=awaiting_staff, person=reviewer, assertion=assertion)
    assert (raised.value.code, raised.value.facts) == ("step_up_invalid", {"reason": "replayed"})
    challenge = StepUpChallenge.objects.get()
    assert challenge.used_digests == [awaiting_staff.digest]
    assert challenge.used_at is not None


def test_a_removed_passkey_no_longer_signs(awaiting_staff, reviewer):
    key = enrol(reviewer)
    assertion = signed_for(reviewer, key, [awaiting_staff.digest])
    Passkey.objects.filter(user=reviewer).delete()
    error = refused(awaiting_staff, reviewer, assertion)
    assert (error.code, error.facts) == ("step_up_invalid", {"reason": "not_your_passkey"})


# Success -----------------------------------------------------------------------------------------


def test_a_signed_approval_is_kept_with_the_approval_and_in_its_audit_record(awaiting_staff, reviewer):
    key = enrol(reviewer, name="Work laptop")
    options = step_up_options(person=reviewer, digests=[awaiting_staff.digest])
    challenge = StepUpChallenge.objects.get()
    assert options["challenge"] == challenge_b64(step_up_challenge(bytes(challenge.nonce), [awaiting_staff.digest]))
    assert options["userVerification"] == "required"
    assert options["rpId"] == RP_ID
    approve(awaiting_staff, reviewer, key.assertion(options))

    awaiting_staff.refresh_from_db()
    assert awaiting_staff.status == PreviewStatus.APPROVED
    signature = ApprovalSignature.objects.select_related("approval").get()
    assert signature.approval.approver == reviewer
    assert signature.approval.role == ApprovalRole.STAFF
    assert bytes(signature.credential_id) == key.credential_id
    assert bytes(signature.public_key) == key.cose_public_key()
    assert bytes(signature.nonce) == bytes(challenge.nonce)
    assert signature.digests == [awaiting_staff.digest]
    assert (signature.rp_id, signature.origin, signature.sign_count) == (RP_ID, ORIGIN, 1)
    assert signature.passkey_name == "Work laptop"
    assert signature.counter_regressed is False
    record = AuditRecord.objects.get(preview=awaiting_staff, event=AuditEvent.APPROVED)
    assert record.approval_basis["passkey"] == signature_document(signature)
    assert record.approval_basis["digest"] == awaiting_staff.digest
    assert passkey_signature_problems(record.approval_basis["passkey"], digest=awaiting_staff.digest) == []
    passkey = Passkey.objects.get()
    assert (passkey.sign_count, passkey.last_used_at is not None) == (1, True)


def challenge_b64(raw: bytes) -> str:
    from webauthn.helpers import bytes_to_base64url

    return bytes_to_base64url(raw)


def test_a_counter_that_goes_backwards_is_flagged_not_refused(awaiting_staff, reviewer, alice):
    key = enrol(reviewer)
    Passkey.objects.update(sign_count=10)
    approve(awaiting_staff, reviewer, signed_for(reviewer, key, [awaiting_staff.digest], sign_count=5))
    signature = ApprovalSignature.objects.get()
    assert (signature.counter_regressed, signature.sign_count) == (True, 5)
    basis = AuditRecord.objects.get(preview=awaiting_staff, event=AuditEvent.APPROVED).approval_basis
    assert basis["passkey"]["counter_regressed"] is True
    assert Passkey.objects.get().sign_count == 10  # the highest seen stays


def test_a_synced_passkey_whose_counter_stays_0_is_not_flagged(awaiting_staff, reviewer, alice):
    key = enrol(reviewer, count_step=0)
    second = big(alice, "o-80", 12500)
    approve(awaiting_staff, reviewer, signed_for(reviewer, key, [awaiting_staff.digest]))
    approve(second, reviewer, signed_for(reviewer, key, [second.digest]))
    assert list(ApprovalSignature.objects.values_list("sign_count", "counter_regressed")) == [(0, False), (0, False)]


def test_a_passkey_replaces_neither_four_eyes_nor_the_quorum(settings, alice, reviewer, second_reviewer):
    settings.REVIEW_QUORUM = "refund_order:EUR:12000:2"
    preview = big(alice, "o-81", 12000)
    alices_key = enrol(alice, name="Alice's phone")
    # the customer cannot approve her own refund as staff, passkey or not
    with pytest.raises(DecisionError) as raised:
        preview_approve(
            preview_id=preview.pk,
            approver=alice,
            role=ApprovalRole.STAFF,
            digest=preview.digest,
            passkey_assertion=signed_for(alice, alices_key, [preview.digest]),
        )
    assert raised.value.code == "four_eyes"
    ritas_key = enrol(reviewer)
    approve(preview, reviewer, signed_for(reviewer, ritas_key, [preview.digest]))
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF  # one signed approval of the two needed
    assert not Refund.objects.exists()
    rons_key = enrol(second_reviewer, name="Ron's phone")
    approve(preview, second_reviewer, signed_for(second_reviewer, rons_key, [preview.digest]))
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.APPROVED
    assert ApprovalSignature.objects.count() == 2


# The customer's confirmation ---------------------------------------------------------------------


def test_a_customer_confirmation_at_its_threshold_needs_the_customers_passkey(settings, alice):
    settings.CUSTOMER_STEP_UP_THRESHOLDS = "refund_order:EUR:5000"
    OrderFactory(number="o-82", customer=alice, currency="EUR", total_minor=9000)
    preview = proposed(alice, "o-82", 6000)
    with pytest.raises(DecisionError) as raised:
        confirmed(preview)
    assert raised.value.code == "step_up_required"
    words = "This request is for €60.00, at or above €50.00: confirm it with your passkey."
    assert raised.value.message.startswith(words)
    key = enrol(alice)
    preview_approve(
        preview_id=preview.pk,
        approver=alice,
        role=ApprovalRole.CUSTOMER,
        digest=preview.digest,
        passkey_assertion=signed_for(alice, key, [preview.digest]),
    )
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.APPROVED
    signature = ApprovalSignature.objects.get()
    assert signature.approval.role == ApprovalRole.CUSTOMER
    record = AuditRecord.objects.get(preview=preview, event=AuditEvent.CONFIRMED)
    assert record.approval_basis["passkey"]["digests"] == [preview.digest]


# Bulk ----------------------------------------------------------------------------------------------


def test_one_assertion_over_the_list_signs_a_bulk_approval(alice, reviewer):
    first, second, outside = big(alice, "o-83", 12000), big(alice, "o-84", 13000), big(alice, "o-85", 14000)
    key = enrol(reviewer)
    listed = [first.digest, second.digest]
    assertion = signed_for(reviewer, key, listed)
    items = [BulkItem(str(p.pk), p.digest, p.subject_version) for p in (first, second, outside)]
    results = previews_decide_many(reviewer=reviewer, items=items, decision="approve", passkey_assertion=assertion)
    assert [(r.ok, r.code) for r in results] == [(True, ""), (True, ""), (False, "step_up_invalid")]
    signatures = ApprovalSignature.objects.select_related("approval").order_by("approval__preview__created_at")
    assert [s.approval.preview_id for s in signatures] == [first.pk, second.pk]
    assert all(s.digests == listed for s in signatures)
    for signature in signatures:
        document = signature_document(signature)
        assert passkey_signature_problems(document, digest=signature.approval.digest) == []
        assert passkey_signature_problems(document, digest=outside.digest) == [
            f"the signature's challenge does not commit to this preview's digest {outside.digest[:12]}…"
        ]
    assert last_refusal(outside)["reason"] == "another_preview"


def test_a_bulk_approval_without_the_assertion_refuses_the_items_that_need_one(alice, reviewer):
    small, large = big(alice, "o-86", 11000), big(alice, "o-87", 12000)
    items = [BulkItem(str(p.pk), p.digest, p.subject_version) for p in (small, large)]
    results = previews_decide_many(reviewer=reviewer, items=items, decision="approve")
    assert [(r.ok, r.code) for r in results] == [(True, ""), (False, "step_up_required")]


# Slack -------------------------------------------------------------------------------------------


def test_slack_cannot_approve_at_a_threshold_and_links_the_console(settings, awaiting_staff, reviewer):
    settings.PUBLIC_BASE_URL = "https://gateway.example.test"
    enrol(reviewer)
    value = ButtonValue(str(awaiting_staff.pk), awaiting_staff.digest, awaiting_staff.subject_version)
    answer = slack_decide(person=reviewer, slack_user_id="U123", value=value, decision=Decision.APPROVE)
    assert answer == (
        "Nothing was decided: This preview is for €120.00, at or above €120.00: approve it with your passkey. "
        "Slack cannot ask for a passkey; approve it in the console: "
        f"https://gateway.example.test/console/previews/{awaiting_staff.pk}/"
    )
    refusal = AuditRecord.objects.filter(preview=awaiting_staff, event=AuditEvent.DECISION_REFUSED).latest("id")
    assert (refusal.result["error"]["code"], refusal.result["channel"]) == ("step_up_required", "slack:U123")
    awaiting_staff.refresh_from_db()
    assert awaiting_staff.status == PreviewStatus.AWAITING_STAFF


def test_slack_still_approves_below_the_threshold(alice, reviewer):
    preview = big(alice, "o-88", 11000)
    value = ButtonValue(str(preview.pk), preview.digest, preview.subject_version)
    assert slack_decide(person=reviewer, slack_user_id="U123", value=value, decision=Decision.APPROVE) is None


def test_the_kept_document_is_json_as_the_log_holds_it(awaiting_staff, reviewer):
    key = enrol(reviewer)
    approve(awaiting_staff, reviewer, signed_for(reviewer, key, [awaiting_staff.digest]))
    document = signature_document(ApprovalSignature.objects.get())
    assert json.loads(json.dumps(document)) == document
    assert set(document) == {
        "format",
        "passkey_name",
        "credential_id",
        "public_key",
        "authenticator_data",
        "client_data_json",
        "signature",
        "nonce",
        "digests",
        "rp_id",
        "origin",
        "sign_count",
        "counter_regressed",
    }


# A standing approval ------------------------------------------------------------------------------


def test_a_standing_approval_does_not_count_where_a_passkey_is_needed(settings, alice):
    from django.contrib.auth.models import Group

    from invoices.models import Invoice, InvoiceContact, InvoiceLine, InvoiceStatus, StandingApproval
    from invoices.permissions import INVOICE_APPROVERS
    from tests.conftest import agent_client_for, propose
    from tests.factories import StaffFactory

    settings.STEP_UP_THRESHOLDS = "send_invoice:*:0"
    sam = StaffFactory(username="sam")
    sam.groups.add(Group.objects.get(name=INVOICE_APPROVERS))
    invoice = Invoice.objects.create(
        number="INV-17", customer=alice, currency="EUR", status=InvoiceStatus.ISSUED, total_minor=12000
    )
    InvoiceLine.objects.create(invoice=invoice, position=1, description="Consulting", quantity=1, unit_minor=12000)
    InvoiceContact.objects.create(invoice=invoice, email="billing@example.test")
    standing = StandingApproval.objects.create(invoice=invoice, recipient="billing@example.test", approved_by=sam)
    response = propose(
        agent_client_for(alice, tools=("send_invoice",)),
        "send_invoice",
        invoice_id="INV-17",
        recipient="billing@example.test",
    )
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    assert preview.status == PreviewStatus.AWAITING_STAFF
    assert not preview.approvals.exists()
    standing.refresh_from_db()
    assert standing.consumed_at is None  # still there for a send below a threshold, if one is set later
    refused = AuditRecord.objects.get(preview=preview, event=AuditEvent.STANDING_APPROVAL_REFUSED)
    assert refused.actor == sam
    assert refused.result["reason"].startswith("an approval at this amount needs a passkey")
    assert not AuditRecord.objects.filter(preview=preview, event=AuditEvent.STANDING_APPROVAL_USED).exists()
    # sam approves it in the console with his passkey
    key = enrol(sam)
    approve(preview, sam, signed_for(sam, key, [preview.digest]))
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.APPROVED
    assert ApprovalSignature.objects.get().approval.approver == sam
