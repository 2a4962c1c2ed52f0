"""Passkeys in a real browser: Debian's Chromium with its virtual authenticator (CDP `WebAuthn`: ctap2, internal
transport, resident keys, user verification on). WebAuthn needs a domain, so the live server is reached as
`localhost` (pytest-django's default), never an IP address.

Registration, a staff approval above the threshold without and with a passkey, a customer's confirmation
above its threshold, a bulk step-up, an assertion made for one preview replayed on another (refused), the
kept signature checked offline (and refused once one byte of it changes), and axe over the new pages.
"""

from __future__ import annotations

import json
import re
import urllib.parse

import pytest
from django.contrib.auth.models import Group

from approvals.audit.passkey_check import passkey_signature_problems
from approvals.core.services import preview_approve, signature_document
from approvals.models import ApprovalRole, ApprovalSignature, AuditEvent, AuditRecord, Preview, PreviewStatus
from refunds.models import Refund
from refunds.permissions import REFUND_REVIEWERS
from tests.browser import ARTIFACTS, chromium, requires_chromium
from tests.conftest import agent_client_for, propose
from tests.console.test_queue_browser import axe_violations, session_cookie
from tests.factories import OrderFactory, StaffFactory, UserFactory

PASSWORD = "pass-for-tests"  # tests.factories' password

pytestmark = [pytest.mark.browser, requires_chromium]


@pytest.fixture
def browser_env(live_server, settings):
    assert urllib.parse.urlsplit(live_server.url).hostname == "localhost", live_server.url
    settings.LOGIN_FAILURE_LIMIT = 10**6
    settings.STAFF_REVIEW_THRESHOLDS = {"EUR": 10000}
    settings.STEP_UP_THRESHOLDS = "refund_order:EUR:12000"
    settings.WEBAUTHN_RP_ID = "localhost"
    settings.WEBAUTHN_ORIGINS = [live_server.url]
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        yield browser


def with_authenticator(browser, user, url):
    """A signed-in page of `user` with a virtual platform authenticator of its own (user verification on)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)  # axe is injected
    context.add_cookies([session_cookie(user, url)])
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable", {"enableUI": False})
    cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    return context, page


def register_passkey(page, url: str, name: str) -> None:
    from playwright.sync_api import expect

    page.goto(url)
    expect(page.get_by_role("heading", level=1)).to_have_text("Your passkeys")
    page.get_by_label("Name of the passkey").fill(name)
    page.get_by_label("Your password, again").fill(PASSWORD)
    page.get_by_role("button", name="Add a passkey").click()
    expect(page.get_by_text(f"Your passkey '{name}' is added.")).to_be_visible()
    expect(page.locator(".passkey strong")).to_have_text([name])


def reviewer(username: str):
    user = StaffFactory(username=username)
    user.groups.add(Group.objects.get(name=REFUND_REVIEWERS))
    return user


def waiting_for_staff(customer, number: str, amount: int) -> Preview:
    OrderFactory(number=number, customer=customer, currency="EUR", total_minor=50000)
    response = propose(agent_client_for(customer), order_id=number, amount_minor=amount, reason="damaged")
    assert response.status_code == 201, response.json()
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    return preview_approve(preview_id=preview.pk, approver=customer, role=ApprovalRole.CUSTOMER, digest=preview.digest)


def check_offline(signature: ApprovalSignature, live_url: str) -> None:
    """The kept signature verifies offline; with one byte of its signature changed it does not."""
    document = signature_document(signature)
    digest = signature.approval.digest
    assert passkey_signature_problems(document, digest=digest, rp_id="localhost", origins=[live_url]) == []
    raw = bytearray(bytes(signature.signature))
    raw[-1] ^= 0x01
    from webauthn.helpers import bytes_to_base64url

    tampered = {**document, "signature": bytes_to_base64url(bytes(raw))}
    problems = passkey_signature_problems(tampered, digest=digest)
    assert len(problems) == 1 and problems[0].startswith("the signature does not verify"), problems


def test_a_staff_approval_above_the_threshold_without_and_with_a_passkey(live_server, browser_env, tmp_path):
    from playwright.sync_api import expect

    alice = UserFactory(username="alice")
    sam = reviewer("sam")
    preview = waiting_for_staff(alice, "o-21", 12000)
    detail = f"{live_server.url}/console/previews/{preview.pk}/"

    # Without JavaScript: the refusal page says what to do, with the link to register.
    plain = browser_env.new_context(java_script_enabled=False)
    plain.add_cookies([session_cookie(sam, live_server.url)])
    no_script = plain.new_page()
    no_script.goto(detail)
    no_script.get_by_role("button", name="Approve").click()
    expect(no_script.locator("#decision-error")).to_have_attribute("data-code", "step_up_required")
    expect(no_script.locator("#decision-error")).to_contain_text("This preview is for €120.00, at or above €120.00")
    expect(no_script.locator("#decision-error").get_by_role("link", name="Add a passkey")).to_have_attribute(
        "href", re.compile(r"^/console/passkeys/\?next=")
    )
    plain.close()

    context, page = with_authenticator(browser_env, sam, live_server.url)
    page.goto(detail)
    expect(page.locator("#step-up-note")).to_contain_text("approve it with your passkey")
    expect(page.locator("#step-up-note")).to_contain_text("You have no passkey yet")
    assert axe_violations(page) == []
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#step-up-status")).to_contain_text("You have no passkey yet")
    expect(page.locator("#step-up-status").get_by_role("link", name="Add a passkey")).to_be_visible()
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF

    # Registration: the new page, its form and axe, before and after.
    page.locator("#step-up-status").get_by_role("link", name="Add a passkey").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Your passkeys")
    assert axe_violations(page) == []
    page.get_by_label("Name of the passkey").fill("Work laptop")
    page.get_by_label("Your password, again").fill("not my password")
    page.get_by_role("button", name="Add a passkey").click()
    expect(page.locator("#passkey-status")).to_have_text("That is not your password.")
    page.get_by_label("Your password, again").fill(PASSWORD)
    page.get_by_role("button", name="Add a passkey").click()
    expect(page.get_by_text("Your passkey 'Work laptop' is added.")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "passkeys-console.png"), full_page=True)
    assert axe_violations(page) == []
    assert AuditRecord.objects.filter(event=AuditEvent.PASSKEY_REGISTERED, actor=sam).count() == 1

    page.get_by_role("link", name="Back to what you were deciding").click()
    expect(page).to_have_url(detail)
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("[data-status]")).to_have_attribute("data-status", "executed")
    expect(page.locator("[data-signed]")).to_have_text("signed with passkey “Work laptop”")
    page.screenshot(path=str(ARTIFACTS / "passkeys-approved.png"), full_page=True)
    context.close()

    signature = ApprovalSignature.objects.select_related("approval").get()
    assert (signature.approval.approver, signature.approval.preview_id) == (sam, preview.pk)
    assert (signature.rp_id, signature.origin) == ("localhost", live_server.url)
    assert signature.digests == [preview.digest]
    client_data = json.loads(bytes(signature.client_data_json))
    assert (client_data["type"], client_data["origin"]) == ("webauthn.get", live_server.url)
    basis = AuditRecord.objects.get(preview=preview, event=AuditEvent.APPROVED).approval_basis
    assert basis["passkey"] == signature_document(signature)
    check_offline(signature, live_server.url)
    assert Refund.objects.get().preview_id == preview.pk
    evidence_accepted_then_refused(preview, tmp_path, live_server.url)


def evidence_accepted_then_refused(preview: Preview, tmp_path, origin: str) -> None:
    """verify_evidence accepts the preview's bundle with its browser-made signature, and refuses it once one
    byte of that signature changed."""
    from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

    from approvals.audit.evidence_check import bundle_read
    from tests.approvals.test_audit_evidence import export, note_keys, rezip, verify
    from tests.conftest import seal_all

    seal_all()
    path = export(preview, tmp_path / "evidence.zip")
    code, out, err = verify(path, *note_keys(), extra=("--rp-id", "localhost", "--origin", origin))
    assert (code, err) == (0, []), err
    signed = [line for line in out if line.startswith("Passkey: approvals.json's approval 1")]
    assert len(signed) == 1 and signed[0].endswith("the signature verifies"), out
    assert any(line.startswith("Passkey: consent.json") and "not signed with a passkey" in line for line in out)
    files = bundle_read(path)
    approvals = json.loads(files["approvals.json"])
    raw = bytearray(base64url_to_bytes(approvals["approvals"][0]["passkey"]["signature"]))
    raw[5] ^= 0x01
    approvals["approvals"][0]["passkey"]["signature"] = bytes_to_base64url(bytes(raw))
    tampered = rezip({**files, "approvals.json": json.dumps(approvals).encode()}, tmp_path / "tampered.zip")
    code, _out, err = verify(tampered, *note_keys())
    assert code == 1
    assert len(err) == 1 and err[0].startswith("INVALID: approvals.json's approval 1 holds a passkey"), err


def test_a_customer_confirms_above_their_threshold_with_a_passkey(live_server, browser_env, settings):
    from playwright.sync_api import expect

    settings.CUSTOMER_STEP_UP_THRESHOLDS = "refund_order:EUR:5000"
    alice = UserFactory(username="alice")
    OrderFactory(number="o-22", customer=alice, currency="EUR", total_minor=9000)
    response = propose(agent_client_for(alice), order_id="o-22", amount_minor=6000, reason="damaged")
    preview = Preview.objects.get(pk=response.json()["preview"]["id"])
    confirm_url = f"{live_server.url}/previews/{preview.pk}/"

    context, page = with_authenticator(browser_env, alice, live_server.url)
    page.goto(confirm_url)
    expect(page.locator("#step-up-note")).to_contain_text(
        "This request is for €60.00, at or above €50.00: confirm it with your passkey."
    )
    assert axe_violations(page) == []
    page.locator("#step-up-note").get_by_role("link", name="add one").click()
    expect(page).to_have_url(re.compile(r"/account/passkeys/\?next="))
    register_passkey(page, page.url, "Phone")
    page.screenshot(path=str(ARTIFACTS / "passkeys-account.png"), full_page=True)
    assert axe_violations(page) == []
    page.get_by_role("link", name="Back to what you were deciding").click()
    expect(page).to_have_url(confirm_url)
    page.get_by_role("button", name=re.compile(r"^Confirm")).click()
    expect(page.get_by_role("status").first).to_contain_text("Completed.")
    context.close()

    signature = ApprovalSignature.objects.select_related("approval").get()
    assert (signature.approval.role, signature.approval.approver) == (ApprovalRole.CUSTOMER, alice)
    check_offline(signature, live_server.url)


def test_a_bulk_approval_takes_one_passkey_assertion_over_the_list(live_server, browser_env):
    from playwright.sync_api import expect

    alice = UserFactory(username="alice")
    sam = reviewer("sam")
    previews = [waiting_for_staff(alice, f"o-3{n}", 12000 + n) for n in range(2)]
    context, page = with_authenticator(browser_env, sam, live_server.url)
    register_passkey(page, f"{live_server.url}/console/passkeys/", "Work laptop")

    page.goto(f"{live_server.url}/console/")
    for preview in previews:
        page.locator(f"input[name=item][value^='{preview.pk}:']").check()
    page.get_by_role("button", name="Approve ticked…").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approve 2 previews?")
    expect(page.locator("#step-up-note")).to_contain_text("one passkey confirmation signs this whole list")
    assert axe_violations(page) == []
    page.get_by_role("button", name="Yes, approve 2").click()
    expect(page.get_by_text("You approved 2 previews; each is recorded on its own.")).to_be_visible()
    context.close()

    listed = [p.digest for p in Preview.objects.filter(pk__in=[p.pk for p in previews]).order_by("created_at")]
    signatures = list(ApprovalSignature.objects.select_related("approval"))
    assert len(signatures) == 2
    for signature in signatures:
        assert sorted(signature.digests) == sorted(listed)
        check_offline(signature, live_server.url)
    assert {p.status for p in Preview.objects.filter(pk__in=[p.pk for p in previews])} == {PreviewStatus.EXECUTED}


def test_an_assertion_made_for_one_preview_is_refused_on_another(live_server, browser_env):
    from playwright.sync_api import expect

    alice = UserFactory(username="alice")
    sam = reviewer("sam")
    first, second = waiting_for_staff(alice, "o-41", 12000), waiting_for_staff(alice, "o-42", 12000)
    context, page = with_authenticator(browser_env, sam, live_server.url)
    register_passkey(page, f"{live_server.url}/console/passkeys/", "Work laptop")

    captured: list[str] = []

    def keep_and_drop(route):
        captured.append(urllib.parse.parse_qs(route.request.post_data or "")["passkey_assertion"][0])
        route.abort()

    approve_url = f"**/console/previews/{first.pk}/approve"
    page.route(approve_url, keep_and_drop)
    page.goto(f"{live_server.url}/console/previews/{first.pk}/")
    with page.expect_request(approve_url):
        page.get_by_role("button", name="Approve").click()
    page.wait_for_timeout(300)  # the route's handler runs on the next turn of Playwright's loop
    assert captured and json.loads(captured[0])["type"] == "public-key"
    page.unroute(approve_url)

    # The first preview's assertion, posted with the second preview's form (the script bypassed).
    page.goto(f"{live_server.url}/console/previews/{second.pk}/")
    page.evaluate(
        """(assertion) => {
            const form = document.querySelector('form.approve-form');
            form.querySelector('input[name=passkey_assertion]').value = assertion;
            form.submit();
        }""",
        captured[0],
    )
    expect(page.locator("#decision-error")).to_have_attribute("data-code", "step_up_invalid")
    expect(page.locator("#decision-error")).to_contain_text("made for another preview")
    context.close()
    second.refresh_from_db()
    assert second.status == PreviewStatus.AWAITING_STAFF
    refusal = AuditRecord.objects.filter(preview=second, event=AuditEvent.DECISION_REFUSED).latest("id")
    assert refusal.result["error"]["code"] == "step_up_invalid"
    assert refusal.result["error"]["reason"] == "another_preview"
    assert not ApprovalSignature.objects.exists()
