"""Amounts typed by reviewers: read by the reviewer's locale's rules, refused when ambiguous, and read
back before anything is proposed (issue 30)."""

import pytest
from django.test import Client

from approvals.core.money import amounts_typed_in, parse_major
from approvals.models import AuditEvent, AuditRecord, Preview, PreviewStatus

from .conftest import READING, counter_confirmed, counter_read_back

GERMAN = {"HTTP_ACCEPT_LANGUAGE": "de-DE,de;q=0.9"}
ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en-US,en;q=0.9"}


def _nothing_proposed(preview: Preview) -> None:
    assert not Preview.objects.filter(supersedes=preview).exists()
    assert not AuditRecord.objects.filter(event=AuditEvent.COUNTER_PROPOSED).exists()
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.AWAITING_STAFF


@pytest.mark.parametrize(
    ("text", "locale", "minor"),
    [
        ("4.50", "en_US", 450),
        ("1,000.50", "en_US", 100050),
        ("12,345", "en_US", 1234500),
        ("80", "en_US", 8000),
        ("4,50", "de", 450),
        ("1.000,50", "de_DE", 100050),
        ("1 000,50", "fr_FR", 100050),
    ],
)
def test_amounts_are_read_by_the_locales_rules(text, locale, minor):
    assert parse_major(text, "EUR", locale) == minor


@pytest.mark.parametrize(
    ("text", "locale", "says"),
    [
        ("4,50", "en_US", "'.' before the decimals"),  # 4.50 or 450: ambiguous in English
        ("4.50", "de", "',' before the decimals"),
        ("1e3", "en_US", "ASCII digits"),
        ("\u0664\u066b\u0665\u0660", "en_US", "ASCII digits"),  # Arabic-Indic ٤٫٥٠
        ("\u0664\u0665\u0660", "en_US", "ASCII digits"),  # Arabic-Indic ٤٥٠
        ("\uff14\uff15\uff10", "en_US", "ASCII digits"),  # full-width ４５０
        ("-5", "en_US", "ASCII digits"),
        ("NaN", "en_US", "ASCII digits"),
        ("", "en_US", "ASCII digits"),
    ],
)
def test_anything_else_is_refused_with_how_to_write_it(text, locale, says):
    with pytest.raises(ValueError, match="e.g. 1") as refused:
        parse_major(text, "EUR", locale)
    assert says in str(refused.value)


def test_more_decimals_than_the_currency_has_are_refused():
    with pytest.raises(ValueError, match="JPY has 0 decimal places"):
        parse_major("5.5", "JPY", "en_US")
    assert parse_major("1.234", "KWD", "en_US") == 1234


def test_the_locale_set_for_a_request_is_the_default():
    with amounts_typed_in("de_DE"):
        assert parse_major("4,50", "EUR") == 450
    with pytest.raises(ValueError):
        parse_major("4,50", "EUR")  # back to the display locale, en_US


def test_an_ambiguous_amount_is_refused_in_the_console_and_nothing_is_proposed(awaiting_staff, reviewer_client):
    response = counter_read_back(reviewer_client, awaiting_staff, {"amount": "4,50"}, **ENGLISH)
    page = response.content.decode()
    assert response.status_code == 400
    assert "ambiguous" in page and "e.g. 1,234.50" in page
    assert 'id="counter-error"' in page  # next to the field, with the form open again
    _nothing_proposed(awaiting_staff)


@pytest.mark.parametrize("typed", ["1e3", "\u0664\u0665\u0660", "4,50"])
def test_exponents_and_other_digits_never_reach_a_proposal(awaiting_staff, reviewer_client, typed):
    response = counter_read_back(reviewer_client, awaiting_staff, {"amount": typed}, **ENGLISH)
    assert response.status_code == 400
    _nothing_proposed(awaiting_staff)


def test_the_amount_is_read_back_before_anything_is_proposed(awaiting_staff, reviewer_client):
    response = counter_read_back(reviewer_client, awaiting_staff, {"amount": "4.50"}, **ENGLISH)
    page = response.content.decode()
    assert response.status_code == 200
    assert "You are proposing <strong>a refund of €4.50 on order o-77 instead of €120.00</strong>" in page
    assert 'name="csrfmiddlewaretoken"' in page
    assert f'name="digest" value="{awaiting_staff.digest}"' in page
    assert READING.search(page)
    _nothing_proposed(awaiting_staff)


def test_only_the_confirmed_post_proposes_what_was_read_back(
    awaiting_staff, reviewer, reviewer_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = counter_confirmed(reviewer_client, awaiting_staff, {"amount": "4.50"}, **ENGLISH)
    new = Preview.objects.get(supersedes=awaiting_staff)
    assert response.status_code == 302 and response["Location"] == f"/console/previews/{new.pk}/"
    assert new.amount_minor == 450 and new.proposed_by_id == reviewer.pk
    record = AuditRecord.objects.get(preview=awaiting_staff, event=AuditEvent.COUNTER_PROPOSED)
    assert record.result["changes"] == {"amount": "4.50"} and record.result["digest"] == awaiting_staff.digest


def test_a_german_reviewer_writes_the_decimal_comma(
    awaiting_staff, reviewer_client, django_capture_on_commit_callbacks
):
    page = counter_read_back(reviewer_client, awaiting_staff, {"amount": "4,50"}, **GERMAN).content.decode()
    assert "a refund of €4.50 on order o-77" in page and "German" in page
    with django_capture_on_commit_callbacks(execute=True):
        response = counter_confirmed(reviewer_client, awaiting_staff, {"amount": "4,50"}, **GERMAN)
    assert response.status_code == 302
    assert Preview.objects.get(supersedes=awaiting_staff).amount_minor == 450


def test_a_confirmation_of_something_else_proposes_nothing(awaiting_staff, reviewer_client):
    page = counter_read_back(reviewer_client, awaiting_staff, {"amount": "4.50"}, **ENGLISH).content.decode()
    reading = READING.search(page).group(1)
    # The reviewer confirmed €4.50; a post with that reading but another amount, or read in another
    # locale, is shown back again instead of being proposed.
    for values, headers in [({"amount": "45.00"}, ENGLISH), ({"amount": "4.50"}, GERMAN)]:
        data = {"digest": awaiting_staff.digest, "reading": reading, **values}
        response = reviewer_client.post(f"/console/previews/{awaiting_staff.pk}/counter", data, **headers)
        assert response.status_code in (400, 409)
        _nothing_proposed(awaiting_staff)
    response = reviewer_client.post(
        f"/console/previews/{awaiting_staff.pk}/counter",
        {"digest": awaiting_staff.digest, "reading": reading, "amount": "45.00"},
        **ENGLISH,
    )
    assert 'id="counter-changed"' in response.content.decode()
    assert "a refund of €45.00" in response.content.decode()


def test_the_confirmation_needs_its_csrf_token(awaiting_staff, reviewer, reviewer_client):
    page = counter_read_back(reviewer_client, awaiting_staff, {"amount": "4.50"}).content.decode()
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    data = {"digest": awaiting_staff.digest, "reading": READING.search(page).group(1), "amount": "4.50"}
    assert client.post(f"/console/previews/{awaiting_staff.pk}/counter", data).status_code == 403
    _nothing_proposed(awaiting_staff)


@pytest.mark.parametrize(
    ("currency", "total_minor", "hint", "not_shown"),
    [
        ("JPY", 100000, "In JPY, with no decimals, e.g. 4990.", "49.90"),
        ("KWD", 100000, "In KWD, with 3 decimals, e.g. 49.900.", "49.90."),
        ("EUR", 50000, "In EUR, with 2 decimals, e.g. 49.90.", "4990"),
    ],
)
def test_the_change_forms_example_has_the_currencys_decimals(
    reviewer_client, alice, currency, total_minor, hint, not_shown
):
    """Issue 37: a JPY form suggested "e.g. 49.90" and then refused decimals."""
    from tests.factories import OrderFactory

    from .conftest import confirmed, proposed

    OrderFactory(number="o-90", customer=alice, currency=currency, total_minor=total_minor)
    preview = confirmed(proposed(alice, "o-90", 20000))
    assert preview.status == PreviewStatus.AWAITING_STAFF
    page = reviewer_client.get(f"/console/previews/{preview.pk}/", **ENGLISH).content.decode()
    assert hint in page
    assert f"e.g. {not_shown}" not in page


def test_the_example_is_written_as_the_reviewer_types_amounts():
    from approvals.core.money import example_major

    assert example_major("EUR", "de") == "49,90"
    assert example_major("KWD", "en_US") == "49.900"
    assert parse_major(example_major("JPY", "en_US"), "JPY", "en_US") == 4990
