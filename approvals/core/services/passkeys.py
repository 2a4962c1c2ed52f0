"""Passkeys (WebAuthn, py_webauthn): registering and removing a person's passkeys, the single-use step-up
challenges a decision is signed over, and checking an assertion for one decision.

A step-up assertion is good for exactly one person, one challenge and each digest of that challenge's
list once: the decision service (approvals.core.services.decisions) asks `step_up_check` under the
preview's lock, and a failure is a DecisionError with the code `step_up_required` or `step_up_invalid`
(audited there, like every refused decision). The signature counter is compared with the highest one seen:
one that does not go up (while either is above 0) is flagged on the signature, never refused, so that a
synced passkey (whose counter stays 0) works and a cloned authenticator shows to staff.

Re-entering the password before registering or removing one is the pages' part (approvals.site.passkeys).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import (
    bytes_to_base64url,
    parse_authentication_credential_json,
    parse_authenticator_data,
    parse_client_data_json,
)
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from approvals.core.errors import ApplicationError, DecisionError, ErrorCode
from approvals.core.outbox import outbox_task
from approvals.core.passkey_challenge import NONCE_BYTES, SIGNATURE_FORMAT, step_up_challenge
from approvals.core.rows import update_fields
from approvals.core.services.audit import audit_record
from approvals.core.stepup import step_up_band, step_up_words, webauthn_origins, webauthn_rp_id
from approvals.models import Approval, ApprovalSignature, AuditEvent, Passkey, Preview, StepUpChallenge
from approvals.operations.publish import NOTIFY_PASSKEYS_REMOVED

if TYPE_CHECKING:
    from django.contrib.auth.models import User

CEREMONY_TIMEOUT_MS = 120_000
STEP_UP_CHALLENGE_SECONDS = 300
# A person asking for challenges again and again keeps at most this many open; older ones go.
OPEN_CHALLENGES_PER_PERSON = 20
MAX_DIGESTS = 200


class PasskeyError(ApplicationError):
    """Registering or removing a passkey was refused."""

    code = "passkey_refused"


# Registration ------------------------------------------------------------------------------------


def user_handle(person: User) -> bytes:
    """The WebAuthn user handle of a person: stable (one account on every authenticator), no name or email."""
    return hashlib.sha256(b"approval-gateway-user-handle/v1\n" + str(person.pk).encode()).digest()


def passkey_registration_options(*, person: User) -> tuple[dict[str, Any], bytes]:
    """The options for `navigator.credentials.create` (as JSON) and their challenge, which the caller keeps
    (the page keeps it in the person's session) for `passkey_register`."""
    options = generate_registration_options(
        rp_id=webauthn_rp_id(),
        rp_name=settings.SHOP_NAME,
        user_id=user_handle(person),
        user_name=person.get_username(),
        user_display_name=person.get_full_name() or person.get_username(),
        timeout=CEREMONY_TIMEOUT_MS,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=[_descriptor(passkey) for passkey in person.passkeys.all()],
    )
    return json.loads(options_to_json(options)), options.challenge


def _descriptor(passkey: Passkey) -> PublicKeyCredentialDescriptor:
    transports = []
    for name in passkey.transports:
        try:
            transports.append(AuthenticatorTransport(name))
        except ValueError:
            continue  # a transport this library does not name; the browser finds the key anyway
    return PublicKeyCredentialDescriptor(id=bytes(passkey.credential_id), transports=transports or None)


def _transports(credential: str) -> list[str]:
    try:
        listed = json.loads(credential).get("response", {}).get("transports", [])
    except (ValueError, AttributeError):
        return []
    return [str(name)[:32] for name in listed if isinstance(name, str)][:8] if isinstance(listed, list) else []


def passkey_register(*, person: User, name: str, credential: str, challenge: bytes) -> Passkey:
    """Verify the browser's answer to the registration options made with `challenge` (user verification
    required, on one of WEBAUTHN_ORIGINS for WEBAUTHN_RP_ID) and keep the new passkey under `name`. Audited."""
    name = name.strip()
    if person.passkeys.filter(name=name).exists():
        raise PasskeyError(
            f"You already have a passkey named {name!r}; choose another name.", code="passkey_name_taken"
        )
    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=webauthn_rp_id(),
            expected_origin=webauthn_origins(),
            require_user_verification=True,
        )
    except (WebAuthnException, ValueError, KeyError, TypeError) as error:
        raise PasskeyError(f"The passkey could not be registered: {error}", code="passkey_invalid") from error
    with transaction.atomic():
        if Passkey.objects.filter(credential_id=verified.credential_id).exists():
            raise PasskeyError("This passkey is registered already.", code="passkey_exists")
        passkey = Passkey.objects.create(
            user=person,
            name=name,
            credential_id=verified.credential_id,
            public_key=verified.credential_public_key,
            sign_count=verified.sign_count,
            transports=_transports(credential),
            aaguid=str(verified.aaguid),
            backed_up=verified.credential_backed_up,
        )
        audit_record(
            event=AuditEvent.PASSKEY_REGISTERED,
            actor=person,
            subject_type="user",
            subject_id=person.get_username()[:64],
            result={
                "name": name,
                "credential_id": bytes_to_base64url(verified.credential_id),
                "aaguid": passkey.aaguid,
                "backed_up": passkey.backed_up,
                "transports": passkey.transports,
            },
        )
    return passkey


# Removal -----------------------------------------------------------------------------------------


def _removed_facts(passkey: Passkey) -> dict[str, Any]:
    return {"name": passkey.name, "credential_id": bytes_to_base64url(bytes(passkey.credential_id))}


def passkey_remove(*, person: User, passkey_id: int) -> Passkey | None:
    """Remove one of `person`'s own passkeys; None when they have no such one. Audited."""
    with transaction.atomic():
        passkey = Passkey.objects.select_for_update().filter(user=person, pk=passkey_id).first()
        if passkey is None:
            return None
        passkey.delete()
        audit_record(
            event=AuditEvent.PASSKEY_REMOVED,
            actor=person,
            subject_type="user",
            subject_id=person.get_username()[:64],
            result={**_removed_facts(passkey), "by": "owner"},
        )
    return passkey


MANAGE_PASSKEYS_PERMISSION = "approvals.manage_passkeys"


def may_manage_passkeys(person: Any) -> bool:
    """A lead: active staff who may remove a staff member's passkeys (a lost device)."""
    return bool(person.is_active and person.is_staff and person.has_perm(MANAGE_PASSKEYS_PERMISSION))


def passkeys_remove_for_lost_device(*, lead: User, person: User) -> list[Passkey]:
    """A lead removes every passkey of a staff member (a lost or stolen device). Audited, one record per
    passkey; once it commits the person is emailed that it happened and by whom."""
    if not may_manage_passkeys(lead):
        raise PasskeyError("You may not remove other people's passkeys.", code="not_a_lead")
    if not person.is_staff:
        raise PasskeyError("Only a staff member's passkeys are removed here.", code="not_staff")
    with transaction.atomic():
        removed = list(Passkey.objects.select_for_update().filter(user=person).order_by("pk"))
        for passkey in removed:
            passkey.delete()
            audit_record(
                event=AuditEvent.PASSKEY_REMOVED,
                actor=lead,
                subject_type="user",
                subject_id=person.get_username()[:64],
                result={**_removed_facts(passkey), "by": "lead", "owner": person.get_username()},
            )
        if removed:
            names = [passkey.name for passkey in removed]
            outbox_task(NOTIFY_PASSKEYS_REMOVED, person.pk, lead.get_username(), names)
    return removed


# Step-up: the challenge --------------------------------------------------------------------------


def step_up_options(*, person: User, digests: list[str]) -> dict[str, Any]:
    """A new single-use challenge for `person` over the ordered `digests` (one preview, or a bulk
    decision's list), as options for `navigator.credentials.get` (JSON). Raises DecisionError
    `step_up_required` when the person has no passkey (nothing to sign with), ValueError for a bad list."""
    if not 1 <= len(digests) <= MAX_DIGESTS:
        raise ValueError(f"between 1 and {MAX_DIGESTS} digests")
    passkeys = list(person.passkeys.all())
    if not passkeys:
        raise DecisionError(
            "You have no passkey yet: register one on your passkeys page, then come back.",
            code=ErrorCode.STEP_UP_REQUIRED,
            has_passkey=False,
        )
    nonce = secrets.token_bytes(NONCE_BYTES)
    challenge = step_up_challenge(nonce, digests)
    now = timezone.now()
    with transaction.atomic():
        mine = StepUpChallenge.objects.filter(person=person)
        mine.filter(expires_at__lte=now).delete()
        stale = list(mine.order_by("-created_at").values_list("pk", flat=True)[OPEN_CHALLENGES_PER_PERSON - 1 :])
        if stale:
            StepUpChallenge.objects.filter(pk__in=stale).delete()
        StepUpChallenge.objects.create(
            person=person,
            nonce=nonce,
            challenge=challenge,
            digests=list(digests),
            expires_at=now + timedelta(seconds=STEP_UP_CHALLENGE_SECONDS),
        )
    options = generate_authentication_options(
        rp_id=webauthn_rp_id(),
        challenge=challenge,
        timeout=CEREMONY_TIMEOUT_MS,
        allow_credentials=[_descriptor(passkey) for passkey in passkeys],
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return json.loads(options_to_json(options))


# Step-up: checking one decision's assertion ------------------------------------------------------


@dataclass(frozen=True)
class VerifiedStepUp:
    """A passkey assertion that verified for one decision, with everything kept of it."""

    passkey: Passkey
    nonce: bytes
    digests: list[str]
    credential_id: bytes
    authenticator_data: bytes
    client_data_json: bytes
    signature: bytes
    rp_id: str
    origin: str
    sign_count: int
    counter_regressed: bool


INVALID_WORDS = {
    "malformed": "The passkey confirmation could not be read.",
    "unknown_challenge": "The passkey confirmation was not asked for here, or is too old.",
    "expired": "The passkey confirmation took too long.",
    "another_person": "The passkey confirmation was asked for by someone else.",
    "another_preview": "The passkey confirmation was made for another preview (or another list of previews).",
    "replayed": "This passkey confirmation was used already; each one counts once.",
    "not_your_passkey": "The passkey is not one of yours (or it was removed).",
    "wrong_origin": "The passkey confirmation was made on another site.",
    "wrong_rp_id": "The passkey confirmation was made for another site.",
    "user_not_verified": "The passkey did not verify you (PIN, fingerprint or face); it must.",
    "user_not_present": "The passkey did not see you present.",
    "bad_signature": "The passkey's signature does not verify.",
}


def _invalid(reason: str) -> DecisionError:
    return DecisionError(
        f"{INVALID_WORDS[reason]} Nothing was decided: confirm again with your passkey.",
        code=ErrorCode.STEP_UP_INVALID,
        reason=reason,
    )


def step_up_required_error(preview: Preview, person: User, role: str) -> DecisionError | None:
    """The refusal of a decision that needs a passkey and came without one, or None when it needs none."""
    band = step_up_band(preview, role)
    if band is None:
        return None
    has_passkey = Passkey.objects.filter(user=person).exists()
    then = (
        "No passkey confirmation came with this decision (it needs JavaScript in the browser), so nothing was decided."
        if has_passkey
        else "You have no passkey yet: register one on your passkeys page, then come back. Nothing was decided."
    )
    return DecisionError(
        f"{step_up_words(preview, role)} {then}",
        code=ErrorCode.STEP_UP_REQUIRED,
        has_passkey=has_passkey,
        threshold_minor=band.from_minor,
    )


def step_up_check(*, preview: Preview, person: User, assertion: str) -> VerifiedStepUp:
    """Verify `assertion` (the JSON of navigator.credentials.get's answer) for `person`'s decision on the
    locked preview, and use it up for this preview's digest. Raises DecisionError `step_up_invalid` (with a
    `reason`) for one made for another preview or list, used already, expired, over another person's
    challenge or credential, without user verification, on another origin or RP ID, or with a signature that
    does not verify. Call within the decision's transaction, after the preview's lock."""
    try:
        credential = parse_authentication_credential_json(assertion)
        client_data = parse_client_data_json(credential.response.client_data_json)
        authenticator_data = parse_authenticator_data(credential.response.authenticator_data)
    except (WebAuthnException, ValueError, KeyError, TypeError) as error:
        raise _invalid("malformed") from error
    row = StepUpChallenge.objects.select_for_update().filter(challenge=client_data.challenge).first()
    if row is None:
        raise _invalid("unknown_challenge")
    if row.person_id != person.pk:
        raise _invalid("another_person")
    if row.expires_at <= timezone.now():
        raise _invalid("expired")
    if preview.digest not in row.digests:
        raise _invalid("another_preview")
    if preview.digest in row.used_digests:
        raise _invalid("replayed")
    passkey = Passkey.objects.select_for_update().filter(user=person, credential_id=credential.raw_id).first()
    if passkey is None:
        raise _invalid("not_your_passkey")
    rp_id, origins = webauthn_rp_id(), webauthn_origins()
    if client_data.origin not in origins:
        raise _invalid("wrong_origin")
    if authenticator_data.rp_id_hash != hashlib.sha256(rp_id.encode()).digest():
        raise _invalid("wrong_rp_id")
    if not authenticator_data.flags.up:
        raise _invalid("user_not_present")
    if not authenticator_data.flags.uv:
        raise _invalid("user_not_verified")
    try:
        verified = verify_authentication_response(
            credential=credential,
            expected_challenge=bytes(row.challenge),
            expected_rp_id=rp_id,
            expected_origin=origins,
            credential_public_key=bytes(passkey.public_key),
            credential_current_sign_count=0,  # compared below: a counter that goes back is flagged, not refused
            require_user_verification=True,
        )
    except WebAuthnException as error:
        raise _invalid("bad_signature") from error
    seen = passkey.sign_count
    regressed = (verified.new_sign_count > 0 or seen > 0) and verified.new_sign_count <= seen
    now = timezone.now()
    row.used_digests = [*row.used_digests, preview.digest]
    row.used_at = row.used_at or now
    update_fields(row, ["used_digests", "used_at"])
    passkey.sign_count = max(seen, verified.new_sign_count)
    passkey.last_used_at = now
    update_fields(passkey, ["sign_count", "last_used_at"])
    return VerifiedStepUp(
        passkey=passkey,
        nonce=bytes(row.nonce),
        digests=list(row.digests),
        credential_id=credential.raw_id,
        authenticator_data=credential.response.authenticator_data,
        client_data_json=credential.response.client_data_json,
        signature=credential.response.signature,
        rp_id=rp_id,
        origin=client_data.origin,
        sign_count=verified.new_sign_count,
        counter_regressed=regressed,
    )


def approval_signature_keep(approval: Approval, verified: VerifiedStepUp) -> ApprovalSignature:
    """Keep the verified assertion with the approval it was given for (in the approval's transaction)."""
    return ApprovalSignature.objects.create(
        approval=approval,
        passkey=verified.passkey,
        passkey_name=verified.passkey.name,
        credential_id=verified.credential_id,
        public_key=bytes(verified.passkey.public_key),
        authenticator_data=verified.authenticator_data,
        client_data_json=verified.client_data_json,
        signature=verified.signature,
        nonce=verified.nonce,
        digests=verified.digests,
        rp_id=verified.rp_id,
        origin=verified.origin,
        sign_count=verified.sign_count,
        counter_regressed=verified.counter_regressed,
    )


def signature_document(signature: ApprovalSignature | VerifiedStepUp) -> dict[str, Any]:
    """A kept signature as JSON (bytes as unpadded base64url): what the approval's audit record and the
    evidence bundle carry, and what approvals.audit.passkey_check verifies offline."""
    if isinstance(signature, ApprovalSignature):
        name, public_key = signature.passkey_name, bytes(signature.public_key)
    else:
        name, public_key = signature.passkey.name, bytes(signature.passkey.public_key)
    return {
        "format": SIGNATURE_FORMAT,
        "passkey_name": name,
        "credential_id": bytes_to_base64url(bytes(signature.credential_id)),
        "public_key": bytes_to_base64url(public_key),
        "authenticator_data": bytes_to_base64url(bytes(signature.authenticator_data)),
        "client_data_json": bytes_to_base64url(bytes(signature.client_data_json)),
        "signature": bytes_to_base64url(bytes(signature.signature)),
        "nonce": bytes_to_base64url(bytes(signature.nonce)),
        "digests": list(signature.digests),
        "rp_id": signature.rp_id,
        "origin": signature.origin,
        "sign_count": signature.sign_count,
        "counter_regressed": signature.counter_regressed,
    }
