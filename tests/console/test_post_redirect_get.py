"""Post/Redirect/Get: every console and customer POST that succeeds answers with a redirect to a page
(so reloading it never posts again); a refusal such as "already decided" stays on the form's URL with
the page and its status code."""

from approvals.models import InternalNote, PreviewStatus

from .conftest import confirmed, logged_in, proposed


def test_each_successful_post_redirects(big_order, alice, reviewer, second_reviewer, client):
    customer = logged_in(alice)
    waiting = proposed(alice, big_order.number, 12000)
    confirm = customer.post(f"/previews/{waiting.pk}/confirm", {"digest": waiting.digest})
    assert (confirm.status_code, confirm["Location"]) == (302, f"/previews/{waiting.pk}/")

    declining = proposed(alice, big_order.number, 3000)
    decline = customer.post(f"/previews/{declining.pk}/decline", {"digest": declining.digest, "reason": "no"})
    assert (decline.status_code, decline["Location"]) == (302, f"/previews/{declining.pk}/")

    staff = logged_in(reviewer)
    here = f"/console/previews/{waiting.pk}/"
    claim = staff.post(f"{here}claim", {"operation": "claim"})
    assert (claim.status_code, claim["Location"]) == (302, here)
    note = staff.post(f"{here}notes", {"body": "looked at it"})
    assert (note.status_code, note["Location"]) == (302, f"{here}#internal-notes")
    assert InternalNote.objects.count() == 1
    waiting.refresh_from_db()
    approve = staff.post(f"{here}approve", {"digest": waiting.digest})
    assert (approve.status_code, approve["Location"]) == (302, here)

    rejecting = confirmed(proposed(alice, big_order.number, 13000))
    there = f"/console/previews/{rejecting.pk}/"
    reject = logged_in(second_reviewer).post(f"{there}reject", {"digest": rejecting.digest, "note": "no"})
    assert (reject.status_code, reject["Location"]) == (302, there)

    # Already decided: refused on the form's URL, the page says so, nothing changes.
    again = logged_in(second_reviewer).post(f"{there}reject", {"digest": rejecting.digest, "note": "no"})
    assert again.status_code == 409
    assert 'id="decision-error"' in again.content.decode()
    rejecting.refresh_from_db()
    assert rejecting.status == PreviewStatus.REJECTED

    new = staff.post("/console/payments/new-refund", {"order": big_order.number, "amount": "1.00", "reason": "damaged"})
    assert new.status_code == 302 and new["Location"].startswith("/console/previews/")
