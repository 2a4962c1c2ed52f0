"""Passkey signatures in evidence bundles: the bundle carries each approval's signature as its sealed record
states it, and verify_evidence checks it offline (the challenge recomputed from the digest and the nonce,
the origin, the RP ID, user verification and the signature), says which approvals were signed and which not,
and refuses a bundle whose signature was changed or that names another relying party."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from approvals.audit.evidence_check import bundle_read
from approvals.core.services import (
    passkey_register,
    passkey_registration_options,
    preview_approve,
    step_up_options,
)
from approvals.models import ApprovalRole, AuditEvent, Preview, PreviewStatus
from refunds.permissions import REFUND_REVIEWERS
from tests.approvals.test_audit_evidence import export, note_keys, record_of, rezip, verify
from tests.conftest import propose, seal_all
from tests.factories import OrderFactory, StaffFactory
from tests.passkeys import ORIGIN, RP_ID, SoftPasskey


@pytest.fixture(autouse=True)
def _passkeys(settings):
    settings.WEBAUTHN_RP_ID = RP_ID
    settings.WEBAUTHN_ORIGINS = [ORIGIN]
    settings.CUSTOMER_STEP_UP_THRESHOLDS = "refund_order:EUR:500"
    settings.STEP_UP_THRESHOLDS = "refund_order:EUR:12000"
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 10000}


def enrol(person, name: str) -> SoftPasskey:
    key = SoftPasskey()
    options, challenge = passkey_registration_options(person=person)
    passkey_register(person=person, name=name, credential=key.register(options), challenge=challenge)
    return key


def signed_approve(preview: Preview, person, role: ApprovalRole, key: SoftPasskey) -> None:
    assertion = key.assertion(step_up_options(person=person, digests=[preview.digest]))
    preview_approve(
        preview_id=preview.pk, approver=person, role=role, digest=preview.digest, passkey_assertion=assertion
    )


@pytest.fixture
def signed_refund(alice, alice_agent, django_capture_on_commit_callbacks) -> Preview:
    """A refund of €150.00 that Alice confirms with her passkey and rita approves with hers (signed), sealed."""
    OrderFactory(number="o-50", customer=alice, currency="EUR", total_minor=20000)
    response = propose(alice_agent, order_id="o-50", amount_minor=15000, reason="damaged")
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    signed_approve(preview, alice, ApprovalRole.CUSTOMER, enrol(alice, "Alice's phone"))
    rita = StaffFactory(username="rita")
    rita.groups.add(Group.objects.get(name=REFUND_REVIEWERS))
    with django_capture_on_commit_callbacks(execute=True):
        signed_approve(preview, rita, ApprovalRole.STAFF, enrol(rita, "Work laptop"))
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    seal_all()
    return preview


def test_the_bundle_carries_the_signatures_and_verify_evidence_checks_them(signed_refund, tmp_path):
    path = export(signed_refund, tmp_path / "evidence.zip")
    files = bundle_read(path)
    consent = json.loads(files["consent.json"])
    approvals = json.loads(files["approvals.json"])["approvals"]
    confirmed, approved = record_of(signed_refund, AuditEvent.CONFIRMED), record_of(signed_refund, AuditEvent.APPROVED)
    assert consent["passkey"] == confirmed.approval_basis["passkey"]
    assert consent["passkey"]["passkey_name"] == "Alice's phone"
    assert approvals[0]["passkey"] == approved.approval_basis["passkey"]
    assert approvals[0]["passkey"]["digests"] == [signed_refund.digest]

    code, out, err = verify(path, *note_keys(), extra=("--rp-id", RP_ID, "--origin", ORIGIN))
    assert (code, err) == (0, []), err
    assert (
        f'Passkey: consent.json (record {confirmed.pk}): signed with the passkey "Alice\'s phone" over digest '
        f"{signed_refund.digest[:12]}… (RP ID {RP_ID}, origin {ORIGIN}); the signature verifies"
    ) in out
    assert any(
        line.startswith(f"Passkey: approvals.json's approval 1 (record {approved.pk}): signed with the passkey")
        for line in out
    ), out


def test_an_unsigned_approval_is_reported_as_such(
    alice, o12, alice_agent, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.CUSTOMER_STEP_UP_THRESHOLDS = ""
    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    with django_capture_on_commit_callbacks(execute=True):
        preview_approve(preview_id=preview.pk, approver=alice, role=ApprovalRole.CUSTOMER, digest=preview.digest)
    seal_all()
    code, out, err = verify(export(preview, tmp_path / "evidence.zip"), *note_keys())
    assert (code, err) == (0, []), err
    record = record_of(preview, AuditEvent.CONFIRMED)
    assert f"Passkey: consent.json (record {record.pk}): not signed with a passkey" in out


def test_one_changed_byte_of_a_signature_is_refused(signed_refund, tmp_path):
    path = export(signed_refund, tmp_path / "evidence.zip")
    files = bundle_read(path)
    consent = json.loads(files["consent.json"])
    raw = bytearray(base64url_to_bytes(consent["passkey"]["signature"]))
    raw[8] ^= 0x01
    consent["passkey"]["signature"] = bytes_to_base64url(bytes(raw))
    tampered = rezip({**files, "consent.json": json.dumps(consent).encode()}, tmp_path / "tampered.zip")
    code, out, err = verify(tampered, *note_keys())
    record = record_of(signed_refund, AuditEvent.CONFIRMED)
    assert code == 1
    assert err == [f"INVALID: consent.json holds a passkey, and sealed record {record.pk} states one (or another)"], err


def test_another_relying_party_or_origin_is_refused(signed_refund, tmp_path):
    path = export(signed_refund, tmp_path / "evidence.zip")
    code, _out, err = verify(path, *note_keys(), extra=("--rp-id", "other.example.test"))
    assert code == 1
    assert any("passkey: authenticatorData's RP ID hash is not that of 'other.example.test'" in line for line in err)
    code, _out, err = verify(path, *note_keys(), extra=("--origin", "https://other.example.test"))
    assert code == 1
    assert any(f"passkey: clientDataJSON's origin {ORIGIN!r} is not one of" in line for line in err), err
