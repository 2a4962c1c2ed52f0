"""The offline check of a kept passkey signature (approvals.audit.passkey_check: no database, no Django),
the challenge's construction, and the step-up settings (thresholds, relying party) with their checks."""

import json
import os

import pytest
from django.core.exceptions import ImproperlyConfigured
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from approvals.audit.passkey_check import passkey_signature_problems
from approvals.core.passkey_challenge import SIGNATURE_FORMAT, STEP_UP_DOMAIN, step_up_challenge
from approvals.core.stepup import (
    StepUpBand,
    origin_problem,
    parse_step_up_thresholds,
    step_up_band,
    step_up_settings_are_usable,
    webauthn_origins,
    webauthn_rp_id,
)
from approvals.models import ApprovalRole, Preview
from tests.passkeys import ORIGIN, RP_ID, SoftPasskey, with_flipped_byte

DIGEST_A = "a" * 64
DIGEST_B = "b" * 64


def document(key: SoftPasskey, digests: list[str], nonce: bytes | None = None, **assertion_options: object) -> dict:
    """A signature document as the engine keeps one, made offline."""
    nonce = nonce or os.urandom(32)
    challenge = bytes_to_base64url(step_up_challenge(nonce, digests))
    assertion = json.loads(key.assertion({"challenge": challenge}, **assertion_options))
    response = assertion["response"]
    return {
        "format": SIGNATURE_FORMAT,
        "passkey_name": "Laptop",
        "credential_id": assertion["rawId"],
        "public_key": bytes_to_base64url(key.cose_public_key()),
        "authenticator_data": response["authenticatorData"],
        "client_data_json": response["clientDataJSON"],
        "signature": response["signature"],
        "nonce": bytes_to_base64url(nonce),
        "digests": digests,
        "rp_id": RP_ID,
        "origin": ORIGIN,
        "sign_count": key.sign_count,
        "counter_regressed": False,
    }


def test_the_challenge_is_sha256_of_the_documented_bytes():
    import hashlib

    nonce = bytes(range(32))
    expected = hashlib.sha256(b"approval-gateway-step-up/v1\n" + nonce + b"\n" + DIGEST_A.encode()).digest()
    assert STEP_UP_DOMAIN == b"approval-gateway-step-up/v1\n"
    assert step_up_challenge(nonce, [DIGEST_A]) == expected
    listed = hashlib.sha256(STEP_UP_DOMAIN + nonce + b"\n" + f"{DIGEST_A}\n{DIGEST_B}".encode()).digest()
    assert step_up_challenge(nonce, [DIGEST_A, DIGEST_B]) == listed
    assert step_up_challenge(nonce, [DIGEST_B, DIGEST_A]) != listed  # the order is committed to


@pytest.mark.parametrize(
    ("nonce", "digests", "message"),
    [
        (b"short", [DIGEST_A], "the nonce must be 32 bytes, not 5"),
        (bytes(32), [], "a step-up challenge commits to at least one digest"),
        (bytes(32), ["A" * 64], "not a preview digest (64 lowercase hex characters): 'AAAA"),
    ],
)
def test_the_challenge_refuses_what_it_cannot_commit_to(nonce, digests, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        step_up_challenge(nonce, digests)


def test_a_valid_signature_passes():
    key = SoftPasskey()
    assert passkey_signature_problems(document(key, [DIGEST_A]), digest=DIGEST_A) == []
    assert passkey_signature_problems(document(key, [DIGEST_A, DIGEST_B]), digest=DIGEST_B) == []


def test_one_changed_byte_of_the_signature_fails():
    signed = document(SoftPasskey(), [DIGEST_A])
    raw = bytearray(base64url_to_bytes(signed["signature"]))
    raw[12] ^= 0x01
    tampered = {**signed, "signature": bytes_to_base64url(bytes(raw))}
    problems = passkey_signature_problems(tampered, digest=DIGEST_A)
    assert len(problems) == 1
    assert problems[0].startswith("the signature does not verify with the kept public key")


def test_another_preview_another_nonce_and_another_key_fail():
    key = SoftPasskey()
    signed = document(key, [DIGEST_A])
    assert passkey_signature_problems(signed, digest=DIGEST_B) == [
        f"the signature's challenge does not commit to this preview's digest {DIGEST_B[:12]}…"
    ]
    other_nonce = {**signed, "nonce": bytes_to_base64url(os.urandom(32))}
    assert passkey_signature_problems(other_nonce, digest=DIGEST_A) == [
        "clientDataJSON's challenge is not the one recomputed from the nonce and the digests"
    ]
    other_key = {**signed, "public_key": bytes_to_base64url(SoftPasskey().cose_public_key())}
    assert passkey_signature_problems(other_key, digest=DIGEST_A)[0].startswith("the signature does not verify")


def test_origin_rp_id_and_user_verification_are_checked():
    key = SoftPasskey()
    assert passkey_signature_problems(document(key, [DIGEST_A]), digest=DIGEST_A, origins=["https://other.test"]) == [
        f"clientDataJSON's origin {ORIGIN!r} is not one of ['https://other.test']"
    ]
    assert passkey_signature_problems(document(key, [DIGEST_A]), digest=DIGEST_A, rp_id="other.test") == [
        "authenticatorData's RP ID hash is not that of 'other.test'"
    ]
    assert passkey_signature_problems(document(key, [DIGEST_A], uv=False), digest=DIGEST_A) == [
        "the authenticator did not verify the person (the UP and UV flags must be set)"
    ]


def test_a_document_that_is_not_whole_is_said_so():
    assert passkey_signature_problems({"format": "other"}, digest=DIGEST_A) == [
        f"not a passkey signature document ({SIGNATURE_FORMAT})"
    ]
    signed = document(SoftPasskey(), [DIGEST_A])
    del signed["nonce"]
    assert passkey_signature_problems(signed, digest=DIGEST_A) == ["the signature's nonce is missing or not base64url"]


def test_the_check_imports_no_django():
    import subprocess
    import sys

    code = (
        "import sys; import approvals.audit.passkey_check; "
        "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={})
    assert out.stdout.strip() == "[]"


def test_the_test_helper_flips_one_byte():
    key = SoftPasskey()
    assertion = key.assertion({"challenge": "AAAA"})
    flipped = json.loads(with_flipped_byte(assertion))
    original = json.loads(assertion)
    assert flipped["response"]["signature"] != original["response"]["signature"]
    assert flipped["response"]["clientDataJSON"] == original["response"]["clientDataJSON"]


# Settings ------------------------------------------------------------------------------------------


def test_thresholds_parse():
    assert parse_step_up_thresholds("refund_order:EUR:50000, send_invoice:*:0,") == [
        StepUpBand("refund_order", "EUR", 50000),
        StepUpBand("send_invoice", "*", 0),
    ]
    assert parse_step_up_thresholds("") == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("refund_order:EUR", "STEP_UP_THRESHOLDS item 'refund_order:EUR' is not action:CURRENCY:from_minor"),
        ("refund_order:EURO:5", "the currency is a three-letter code such as EUR, or *"),
        ("refund_order:EUR:5.00", "the amount is a whole number of minor units, at least 0"),
        ("refund_order:EUR:-1", "the amount is a whole number of minor units, at least 0"),
        (":EUR:1", "is not action:CURRENCY:from_minor"),
    ],
)
def test_a_malformed_threshold_is_a_check_error_and_improperly_configured(settings, value, message):
    settings.STEP_UP_THRESHOLDS = value
    errors = [e for e in step_up_settings_are_usable() if e.id == "approvals.E103"]
    assert len(errors) == 1 and message in errors[0].msg
    preview = Preview(action="refund_order", amount_minor=100, currency="EUR")
    with pytest.raises(ImproperlyConfigured, match="STEP_UP_THRESHOLDS item"):
        step_up_band(preview, ApprovalRole.STAFF)


def test_the_customer_thresholds_are_checked_under_their_own_name(settings):
    settings.CUSTOMER_STEP_UP_THRESHOLDS = "refund_order"
    (error,) = [e for e in step_up_settings_are_usable() if e.id == "approvals.E103"]
    assert error.msg.startswith("CUSTOMER_STEP_UP_THRESHOLDS item 'refund_order'")


def test_bands_apply_from_their_amount_per_currency_and_role(settings):
    settings.STEP_UP_THRESHOLDS = "refund_order:EUR:50000,refund_order:*:90000,send_invoice:*:0"
    settings.CUSTOMER_STEP_UP_THRESHOLDS = "refund_order:EUR:100000"

    def band(action, amount, currency, role=ApprovalRole.STAFF):
        return step_up_band(Preview(action=action, amount_minor=amount, currency=currency), role)

    assert band("refund_order", 50000, "EUR") == StepUpBand("refund_order", "EUR", 50000)
    assert band("refund_order", 49999, "EUR") is None
    assert band("refund_order", 89999, "USD") is None
    assert band("refund_order", 90000, "USD") == StepUpBand("refund_order", "*", 90000)
    assert band("send_invoice", None, None) == StepUpBand("send_invoice", "*", 0)
    assert band("refund_order", 60000, "EUR", ApprovalRole.CUSTOMER) is None
    assert band("refund_order", 100000, "EUR", ApprovalRole.CUSTOMER) == StepUpBand("refund_order", "EUR", 100000)


def test_the_relying_party_defaults_to_the_public_base_url(settings):
    settings.PUBLIC_BASE_URL = "https://gateway.example.test:8443"
    settings.WEBAUTHN_RP_ID = ""
    settings.WEBAUTHN_ORIGINS = []
    assert webauthn_rp_id() == "gateway.example.test"
    assert webauthn_origins() == ["https://gateway.example.test:8443"]
    settings.WEBAUTHN_RP_ID = "example.test"
    settings.WEBAUTHN_ORIGINS = ["https://shop.example.test", "https://example.test"]
    assert [e for e in step_up_settings_are_usable() if e.id == "approvals.E104"] == []


def test_origins_outside_the_rp_id_are_a_check_error(settings):
    settings.WEBAUTHN_RP_ID = "example.test"
    settings.WEBAUTHN_ORIGINS = ["https://evil.test", "https://shop.example.test/path"]
    messages = [e.msg for e in step_up_settings_are_usable() if e.id == "approvals.E104"]
    assert messages == [
        "WEBAUTHN_ORIGINS: the origin 'https://evil.test' is not on the RP ID 'example.test' "
        "(its host must be it or end in .example.test).",
        "WEBAUTHN_ORIGINS: 'https://shop.example.test/path' is not an origin (scheme://host[:port], nothing after it).",
    ]
    assert origin_problem("https://notexample.test", "example.test") is not None
