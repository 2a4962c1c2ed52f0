"""The owner confirms in the browser: the exact preview (the action's display rows, no amount), Confirm
and Decline with CSRF and the digest, someone else's preview as if it did not exist, a stale digest."""

import re

import pytest

from approvals.models import Approval, AuditRecord, PreviewStatus
from tests.toy_action.models import Board

from .conftest import events, html, logged_in, proposed, text_of


@pytest.fixture(autouse=True)
def no_login_lockout(settings):
    settings.LOGIN_FAILURE_LIMIT = 10**6


def page_url(preview) -> str:
    return f"/previews/{preview.pk}/"


def form_of(page: str, preview, name: str) -> str:
    form = re.search(rf'<form method="post" action="/previews/{preview.pk}/{name}">(.*?)</form>', page, re.S)
    assert form, f"no {name} form"
    return form.group(1)


def csrf_of(form: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)


def assert_undecided(preview):
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_CUSTOMER
    assert Approval.objects.count() == 0
    board = Board.objects.get(pk=preview.subject_id)
    assert (board.title, board.version) == ("Roadmap", 1)


def test_the_owner_sees_the_exact_rename_with_both_forms_and_no_amount(board, owner, agent):
    preview = proposed(agent)

    response = logged_in(owner).get(page_url(preview))

    assert response.status_code == 200
    page = html(response)
    assert "Rename board b-1 to “Plans for 2027”" in page
    assert "<dt>Board</dt><dd>b-1</dd>" in page
    assert "<dt>Current title</dt><dd>Roadmap</dd>" in page
    assert "<dt>New title</dt><dd>Plans for 2027</dd>" in page
    assert "Board b-1 is called “Plans for 2027” from then on." in page  # the action's consequence
    assert "Waiting for your confirmation" in text_of(page)
    for name in ("confirm", "decline"):
        form = form_of(page, preview, name)
        assert 'name="csrfmiddlewaretoken"' in form
        assert f'name="digest" value="{preview.digest}"' in form
    # A preview without money shows none.
    assert not re.search(r"\d\.\d\d\b", text_of(page))
    assert "€" not in page and "amount" not in page.lower()


def test_confirming_with_csrf_and_the_digest_renames_the_board_once(
    board, owner, agent, django_capture_on_commit_callbacks
):
    preview = proposed(agent)
    browser = logged_in(owner, enforce_csrf_checks=True)
    form = form_of(html(browser.get(page_url(preview))), preview, "confirm")

    # Without the CSRF token the form is refused before anything is decided.
    assert browser.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest}).status_code == 403
    assert_undecided(preview)

    with django_capture_on_commit_callbacks(execute=True):
        response = browser.post(
            f"/previews/{preview.pk}/confirm", {"digest": preview.digest, "csrfmiddlewaretoken": csrf_of(form)}
        )

    assert response.status_code == 302 and response["Location"] == page_url(preview)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.EXECUTED
    approval = Approval.objects.get()
    assert (approval.approver, approval.role, approval.digest, approval.subject_version) == (
        owner,
        "customer",
        preview.digest,
        1,
    )
    board.refresh_from_db()
    assert (board.title, board.version) == ("Plans for 2027", 2)
    done = html(browser.get(page_url(preview)))
    assert "Board b-1 is now called “Plans for 2027”." in done
    assert f'action="/previews/{preview.pk}/confirm"' not in done


def test_someone_elses_preview_is_404_and_nothing_is_recorded(board, agent, stranger):
    preview = proposed(agent)
    browser = logged_in(stranger)

    assert browser.get(page_url(preview)).status_code == 404
    assert browser.get(f"/previews/{preview.pk}/status").status_code == 404
    assert browser.post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest}).status_code == 404
    assert browser.post(f"/previews/{preview.pk}/decline", {"digest": preview.digest}).status_code == 404

    assert_undecided(preview)
    assert not AuditRecord.objects.filter(actor=stranger).exists()
    assert events(preview) == ["proposed"]


def test_a_digest_that_is_not_the_previews_is_409_and_audited(board, owner, agent):
    preview = proposed(agent)

    response = logged_in(owner).post(f"/previews/{preview.pk}/confirm", {"digest": "0" * 64})

    assert response.status_code == 409
    assert "This request changed while you were looking at it." in html(response)
    assert_undecided(preview)
    refused = AuditRecord.objects.get(preview=preview, event="decision_refused")
    assert refused.actor == owner
    assert (refused.result["error"]["code"], refused.result["role"]) == ("digest_mismatch", "customer")


def test_declining_with_a_reason_ends_the_preview_and_the_agent_reads_why(board, owner, agent):
    preview = proposed(agent)

    response = logged_in(owner).post(
        f"/previews/{preview.pk}/decline", {"digest": preview.digest, "reason": "Wrong board"}
    )

    assert response.status_code == 302
    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.DECLINED, "declined")
    declined = AuditRecord.objects.get(preview=preview, event="declined")
    assert (declined.actor, declined.result["note"]) == (owner, "Wrong board")
    body = agent.get(f"/api/agent/previews/{preview.pk}").json()
    assert (body["status"], body["executed"]) == ("declined", False)
    assert body["preview"]["failure"] == {"code": "declined", "reason": "The customer declined."}
    assert body["customer_note"] == "Wrong board"  # the customer's words, in their own field
    assert Board.objects.get(pk="b-1").title == "Roadmap"


def test_the_page_of_a_rename_that_needs_staff_says_so_without_speaking_of_an_amount(board, owner, agent):
    preview = proposed(agent, title="Official roadmap")

    page = html(logged_in(owner).get(page_url(preview)))

    assert "member of our support team reviews it after you confirm" in page
    assert "amount" not in page.lower()


def test_a_board_changed_since_the_preview_makes_it_out_of_date_in_the_owners_words(board, owner, agent):
    preview = proposed(agent)
    Board.objects.filter(pk="b-1").update(title="Renamed elsewhere", version=2)

    response = logged_in(owner).post(f"/previews/{preview.pk}/confirm", {"digest": preview.digest})

    assert response.status_code == 409
    preview.refresh_from_db()
    assert (preview.status, preview.failure_code) == (PreviewStatus.SUPERSEDED, "subject_changed")
    assert events(preview) == ["proposed", "superseded", "decision_refused"]
    # The engine speaks of what the preview is about, not of orders or invoices it knows nothing of.
    told = " ".join(
        text_of(part)
        for part in re.findall(
            r'<div class="(?:alert alert-error|status[^"]*)" role="(?:alert|status)"[^>]*>(.*?)</div>',
            html(response),
            re.S,
        )
    )
    assert told
    assert "order" not in told.lower() and "invoice" not in told.lower()
    assert "order" not in preview.failure_reason.lower()
