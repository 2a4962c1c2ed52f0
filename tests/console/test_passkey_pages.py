"""The passkeys pages (/console/passkeys/, /account/passkeys/) through the test client: registering and
removing need the password again and are audited; a lead removes a staff member's passkeys and the person
is emailed; the step-up options answer in JSON with the refusal codes; the decision pages explain a
step-up and say what to do without a passkey."""

import re

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from approvals.core.passkey_challenge import step_up_challenge
from approvals.core.staff_roles import LEADS
from approvals.models import AuditEvent, AuditRecord, Passkey, PreviewStatus, StepUpChallenge
from tests.factories import StaffFactory
from tests.passkeys import ORIGIN, RP_ID, SoftPasskey

from .conftest import logged_in

PASSWORD = "pass-for-tests"  # tests.factories' password
JSON = {"HTTP_ACCEPT": "application/json"}


@pytest.fixture(autouse=True)
def _relying_party(settings):
    settings.WEBAUTHN_RP_ID = RP_ID
    settings.WEBAUTHN_ORIGINS = [ORIGIN]
    settings.STEP_UP_THRESHOLDS = "refund_order:EUR:12000"


def register_through_pages(client, base: str, name: str = "Laptop", key: SoftPasskey | None = None):
    key = key or SoftPasskey()
    answer = client.post(f"{base}register/options", {"name": name, "password": PASSWORD}, **JSON)
    assert answer.status_code == 200, answer.content
    options = answer.json()["options"]
    assert options["authenticatorSelection"]["userVerification"] == "required"
    assert options["rp"]["id"] == RP_ID
    done = client.post(f"{base}register", {"credential": key.register(options)}, **JSON)
    return key, done


def test_a_reviewer_registers_a_passkey_with_the_password_again(reviewer):
    client = logged_in(reviewer)
    page = client.get("/console/passkeys/")
    assert page.status_code == 200
    assert "You have no passkey yet." in page.content.decode()
    key, done = register_through_pages(client, "/console/passkeys/", "Work laptop")
    assert done.status_code == 200, done.content
    assert done.json() == {"ok": True, "redirect": "/console/passkeys/"}
    passkey = Passkey.objects.get()
    assert (passkey.user, passkey.name, bytes(passkey.credential_id)) == (reviewer, "Work laptop", key.credential_id)
    assert bytes(passkey.public_key) == key.cose_public_key()
    assert passkey.transports == ["internal"]
    record = AuditRecord.objects.get(event=AuditEvent.PASSKEY_REGISTERED)
    assert (record.actor, record.subject_id, record.result["name"]) == (reviewer, "rita", "Work laptop")
    assert "Work laptop" in client.get("/console/passkeys/").content.decode()


def test_a_wrong_password_registers_nothing(reviewer):
    client = logged_in(reviewer)
    answer = client.post("/console/passkeys/register/options", {"name": "Laptop", "password": "nope"}, **JSON)
    assert answer.status_code == 403
    assert answer.json() == {"ok": False, "error": {"code": "wrong_password", "message": "That is not your password."}}
    # without the first post (its password check) a credential is refused
    late = client.post("/console/passkeys/register", {"credential": "{}"}, **JSON)
    assert late.status_code == 409
    assert late.json()["error"]["code"] == "reauthentication_required"
    assert not Passkey.objects.exists()
    assert not AuditRecord.objects.filter(event=AuditEvent.PASSKEY_REGISTERED).exists()


def test_a_registration_without_user_verification_is_refused(reviewer):
    client = logged_in(reviewer)
    answer = client.post("/console/passkeys/register/options", {"name": "Laptop", "password": PASSWORD}, **JSON)
    credential = SoftPasskey().register(answer.json()["options"], uv=False)
    done = client.post("/console/passkeys/register", {"credential": credential}, **JSON)
    assert done.status_code == 400
    assert done.json()["error"]["code"] == "passkey_invalid"
    assert not Passkey.objects.exists()


def test_the_form_without_javascript_says_it_needs_it(reviewer):
    page = logged_in(reviewer).post("/console/passkeys/register/options", {"name": "Laptop", "password": PASSWORD})
    assert page.status_code == 400
    assert "Adding a passkey needs JavaScript in this browser; nothing was added." in page.content.decode()


def test_only_active_staff_use_the_console_page_and_customers_have_their_own(alice):
    assert logged_in(alice).get("/console/passkeys/").status_code == 403
    client = logged_in(alice)
    assert client.get("/account/passkeys/").status_code == 200
    _key, done = register_through_pages(client, "/account/passkeys/", "Phone")
    assert done.json() == {"ok": True, "redirect": "/account/passkeys/"}
    assert Passkey.objects.get().user == alice


def test_removing_needs_the_password_and_is_audited(reviewer):
    client = logged_in(reviewer)
    register_through_pages(client, "/console/passkeys/", "Old phone")
    passkey = Passkey.objects.get()
    wrong = client.post(f"/console/passkeys/{passkey.pk}/remove", {"password": "nope"})
    assert wrong.status_code == 403
    assert "That is not your password. Nothing was removed." in wrong.content.decode()
    assert Passkey.objects.exists()
    done = client.post(f"/console/passkeys/{passkey.pk}/remove", {"password": PASSWORD})
    assert done.status_code == 302
    assert not Passkey.objects.exists()
    record = AuditRecord.objects.get(event=AuditEvent.PASSKEY_REMOVED)
    assert record.result["by"] == "owner" and record.result["name"] == "Old phone"


def test_nobody_removes_someone_elses_passkey_by_its_id(reviewer, second_reviewer):
    register_through_pages(logged_in(reviewer), "/console/passkeys/")
    passkey = Passkey.objects.get()
    answer = logged_in(second_reviewer).post(f"/console/passkeys/{passkey.pk}/remove", {"password": PASSWORD})
    assert answer.status_code == 302
    assert Passkey.objects.filter(pk=passkey.pk).exists()


def test_a_lead_removes_a_staff_members_passkeys_and_they_are_emailed(
    reviewer, second_reviewer, django_capture_on_commit_callbacks
):
    register_through_pages(logged_in(reviewer), "/console/passkeys/", "Lost phone")
    lead = StaffFactory(username="lena")
    lead.groups.add(Group.objects.get(name=LEADS))
    client = logged_in(lead)
    page = client.get("/console/passkeys/").content.decode()
    assert "Yes, remove all passkeys of rita" in page
    # a reviewer who is no lead may not
    refused = logged_in(second_reviewer).post(f"/console/passkeys/people/{reviewer.pk}/remove", {"password": PASSWORD})
    assert refused.status_code == 403
    assert Passkey.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(f"/console/passkeys/people/{reviewer.pk}/remove", {"password": PASSWORD})
    assert done.status_code == 302
    assert not Passkey.objects.filter(user=reviewer).exists()
    record = AuditRecord.objects.get(event=AuditEvent.PASSKEY_REMOVED)
    assert (record.actor, record.result["by"], record.result["owner"]) == (lead, "lead", "rita")
    (message,) = mail.outbox
    assert message.to == [reviewer.email]
    assert message.subject.endswith("Your passkeys were removed")
    assert "lena removed your passkeys ('Lost phone')" in message.body
    assert "/console/passkeys/" in message.body


def test_the_step_up_options_commit_to_the_posted_digests(reviewer, awaiting_staff):
    client = logged_in(reviewer)
    no_passkey = client.post("/console/passkeys/step-up?next=/console/", {"digest": awaiting_staff.digest})
    assert no_passkey.status_code == 409
    body = no_passkey.json()
    assert body["ok"] is False
    assert body["error"]["code"] == "step_up_required"
    assert body["error"]["register_url"] == "/console/passkeys/?next=%2Fconsole%2F"
    bad = client.post("/console/passkeys/step-up", {"digest": "x" * 64})
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_request")
    key, _done = register_through_pages(client, "/console/passkeys/")
    digests = [awaiting_staff.digest, "f" * 64]
    answer = client.post("/console/passkeys/step-up", {"digest": digests})
    assert answer.status_code == 200
    options = answer.json()["options"]
    row = StepUpChallenge.objects.get()
    assert (row.person, row.digests) == (reviewer, digests)
    assert base64url_to_bytes(options["challenge"]) == step_up_challenge(bytes(row.nonce), digests)
    assert [c["id"] for c in options["allowCredentials"]] == [bytes_to_base64url(key.credential_id)]
    assert (options["rpId"], options["userVerification"]) == (RP_ID, "required")


def test_the_console_page_explains_the_step_up_and_refuses_an_approval_without_it(reviewer, awaiting_staff):
    client = logged_in(reviewer)
    page = client.get(f"/console/previews/{awaiting_staff.pk}/").content.decode()
    assert "This preview is for €120.00, at or above €120.00: approve it with your passkey." in page
    assert "You have no passkey yet" in page
    assert f'data-step-up-digests="{awaiting_staff.digest}"' in page
    assert "js/passkeys.js" in page
    answer = client.post(f"/console/previews/{awaiting_staff.pk}/approve", {"digest": awaiting_staff.digest})
    assert answer.status_code == 409
    html = answer.content.decode()
    assert 'data-code="step_up_required"' in html
    assert re.search(r'<a href="/console/passkeys/\?next=[^"]+">Add a passkey</a>', html)
    awaiting_staff.refresh_from_db()
    assert awaiting_staff.status == PreviewStatus.AWAITING_STAFF


def test_the_customer_page_explains_the_step_up(settings, alice, big_order):
    from .conftest import proposed

    settings.CUSTOMER_STEP_UP_THRESHOLDS = "refund_order:EUR:12000"
    preview = proposed(alice, big_order.number, 12000)
    client = logged_in(alice)
    page = client.get(f"/previews/{preview.pk}/").content.decode()
    assert "This request is for €120.00, at or above €120.00: confirm it with your passkey." in page
    assert f"/account/passkeys/?next=%2Fpreviews%2F{preview.pk}%2F" in page
    answer = client.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})
    assert answer.status_code == 409
    html = answer.content.decode()
    assert 'data-code="step_up_required"' in html
    assert "Add a passkey" in html
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER


def test_below_the_threshold_the_pages_ask_for_no_passkey(settings, alice, big_order):
    from .conftest import proposed

    settings.CUSTOMER_STEP_UP_THRESHOLDS = "refund_order:EUR:12000"
    preview = proposed(alice, big_order.number, 1000)
    page = logged_in(alice).get(f"/previews/{preview.pk}/").content.decode()
    assert 'id="step-up-note"' not in page
    assert "data-step-up-url" not in page
