"""The review queue: oldest first, counts per state, filters, search, pagination, constant queries."""

import html as html_module
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.console.selectors import QueueFilters, review_queue
from approvals.console.selectors import queue as selectors
from approvals.models import Preview, PreviewStatus
from tests.factories import UserFactory

from .conftest import bulk_previews

DEFAULT_STATE = selectors.DEFAULT_QUEUE_STATE


def text(html: str) -> str:
    return " ".join(html_module.unescape(re.sub(r"<[^>]+>", " ", html)).replace("\xa0", " ").split())


def aged(previews, **delta):
    Preview.objects.filter(pk__in=[p.pk for p in previews]).update(created_at=timezone.now() - timedelta(**delta))


def test_a_row_says_the_action_in_words_with_its_age_and_expiry(awaiting_staff, reviewer_client):
    Preview.objects.filter(pk=awaiting_staff.pk).update(
        created_at=timezone.now() - timedelta(minutes=12, seconds=5),
        expires_at=timezone.now() + timedelta(minutes=3, seconds=30),
    )
    page = text(reviewer_client.get("/console/").content.decode())
    assert "Refund €120.00 on o-77 for customer “alice”, damaged" in page
    assert "12 minutes ago" in page
    assert "expires in 3 minutes" in page
    assert "Waiting for staff review 1" in page


def test_the_queue_is_oldest_first_and_waiting_for_staff_by_default(reviewer, alice, big_order):
    newer = bulk_previews(1, customer=alice, order_number="o-77", amount_minor=20000)
    older = bulk_previews(1, customer=alice, order_number="o-77", amount_minor=30000)
    aged(older, hours=2)
    bulk_previews(1, customer=alice, order_number="o-77", status=PreviewStatus.EXECUTED)
    queue = review_queue(user=reviewer, filters=QueueFilters())
    assert [row.preview.pk for row in queue.rows] == [older[0].pk, newer[0].pk]
    counts = {c.state: c.count for c in queue.counts}
    assert counts["awaiting_staff"] == 2 and counts["executed"] == 1 and counts["failed"] == 0
    assert queue.total_all == 3


def test_filters_and_search(reviewer, alice, big_order):
    bob = UserFactory(username="bob")
    eur = bulk_previews(2, customer=alice, order_number="o-77")
    usd = bulk_previews(1, customer=bob, order_number="o-17", currency="USD")
    old = bulk_previews(1, customer=alice, order_number="o-78")
    aged(old, days=2)
    failed = bulk_previews(1, customer=alice, order_number="o-77", status=PreviewStatus.FAILED)
    bulk_previews(1, customer=alice, order_number="INV-1", action="send_invoice")  # not a refund reviewer's

    def ids(**filters):
        return {row.preview.pk for row in review_queue(user=reviewer, filters=QueueFilters(**filters)).rows}

    def pks(previews):
        return {p.pk for p in previews}

    assert ids() == pks(eur + usd + old)
    assert ids(currency="USD") == pks(usd)
    assert ids(query="o-17") == pks(usd)
    assert ids(query="BOB") == pks(usd)
    assert ids(query=str(eur[0].pk)) == {eur[0].pk}
    assert ids(age="1d") == pks(old)
    assert ids(state="failed") == pks(failed)
    assert ids(state="all") == pks(eur + usd + old + failed)
    assert ids(action="refund_order", state="all") == pks(eur + usd + old + failed)
    counts = {c.state: c.count for c in review_queue(user=reviewer, filters=QueueFilters(currency="USD")).counts}
    assert counts["awaiting_staff"] == 1 and counts["failed"] == 0


def test_filters_through_the_page(reviewer_client, alice, big_order):
    bulk_previews(1, customer=alice, order_number="o-77")
    bulk_previews(1, customer=alice, order_number="o-78", currency="USD")
    page = text(reviewer_client.get("/console/?currency=usd").content.decode())
    assert "on o-78" in page and "on o-77" not in page
    # A bad filter value is shown as an error and ignored, not a crash.
    response = reviewer_client.get("/console/?currency=12345&age=forever&state=nonsense")
    assert response.status_code == 200
    assert "on o-77" in text(response.content.decode())


def test_pagination_keeps_the_filters(reviewer_client, alice, big_order, monkeypatch):
    monkeypatch.setattr(selectors, "QUEUE_PAGE_SIZE", 2)
    previews = bulk_previews(5, customer=alice, order_number="o-77")
    for minutes, preview in zip([50, 40, 30, 20, 10], previews, strict=True):
        Preview.objects.filter(pk=preview.pk).update(created_at=timezone.now() - timedelta(minutes=minutes))
    page = reviewer_client.get("/console/?currency=EUR&page=2").content.decode()
    assert str(previews[2].pk) in page and str(previews[3].pk) in page
    assert str(previews[0].pk) not in page and str(previews[4].pk) not in page
    assert "Page 2 of 3" in page
    assert 'href="?currency=EUR&amp;page=3"' in page and 'href="?currency=EUR&amp;page=1"' in page


@pytest.mark.parametrize("rows", [10, 200])
def test_the_queue_runs_a_constant_number_of_queries(
    rows, reviewer_client, alice, big_order, monkeypatch, django_assert_max_num_queries
):
    monkeypatch.setattr(selectors, "QUEUE_PAGE_SIZE", 500)  # every row on one page
    customers = [UserFactory(username=f"customer-{i}") for i in range(5)]
    for i in range(rows):
        bulk_previews(1, customer=customers[i % 5], order_number=f"o-{i}")
    # session, user, user and group permissions, the staff states' counts, a capped count for each of
    # the nine other states, page rows, the customers' refund history (a risk flag)
    with django_assert_max_num_queries(16):
        response = reviewer_client.get("/console/")
    assert response.status_code == 200
    assert response.content.decode().count('<th scope="row">') == rows


def test_10_and_200_rows_cost_the_same_queries(reviewer_client, alice, big_order, monkeypatch):
    monkeypatch.setattr(selectors, "QUEUE_PAGE_SIZE", 500)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert reviewer_client.get("/console/?state=all").status_code == 200
        return len(captured)

    bulk_previews(10, customer=alice, order_number="o-77")
    ten = queries()
    bulk_previews(190, customer=UserFactory(username="dora"), order_number="o-78")
    assert queries() == ten


def test_states_staff_do_not_work_on_are_counted_up_to_a_cap_and_exactly_when_listed(
    reviewer, reviewer_client, alice, big_order, monkeypatch
):
    monkeypatch.setattr(selectors, "STATE_COUNT_CAP", 3)
    monkeypatch.setattr(selectors, "QUEUE_PAGE_SIZE", 2)
    bulk_previews(2, customer=alice, order_number="o-77")
    bulk_previews(4, customer=alice, order_number="o-77", status=PreviewStatus.NEEDS_ATTENTION)
    executed = bulk_previews(5, customer=alice, order_number="o-77", status=PreviewStatus.EXECUTED)
    bulk_previews(3, customer=alice, order_number="o-77", status=PreviewStatus.FAILED)
    bulk_previews(4, customer=alice, order_number="o-78", status=PreviewStatus.AWAITING_CUSTOMER)

    queue = review_queue(user=reviewer, filters=QueueFilters())
    counts = {c.state: (c.count, c.at_least) for c in queue.counts}
    assert counts["awaiting_staff"] == (2, False)
    assert counts["needs_attention"] == (4, False)  # staff's work: exact past the cap
    assert counts["executed"] == (3, True)  # five, counted no further than the cap
    assert counts["awaiting_customer"] == (3, True)  # four
    assert counts["failed"] == (3, False)  # exactly at the cap is still exact
    assert (queue.total, queue.total_all, queue.total_all_at_least) == (2, 15, True)
    page = reviewer_client.get("/console/").content.decode()
    assert "Completed more than 3 +" in text(page)
    assert "Any state more than 15 +" in text(page)
    assert "Waiting for staff review 2" in text(page)
    assert "Needs attention 4" in text(page)

    listed = review_queue(user=reviewer, filters=QueueFilters(state="executed"))
    assert {c.state: c.count for c in listed.counts}["executed"] == 5
    assert listed.total == 5 and listed.page.paginator.num_pages == 3
    assert {row.preview.pk for row in listed.rows} <= {p.pk for p in executed}

    everything = review_queue(user=reviewer, filters=QueueFilters(state="all"))
    assert (everything.total, everything.total_all, everything.total_all_at_least) == (18, 18, False)
    assert everything.page.paginator.num_pages == 9
    assert "Any state 18" in text(reviewer_client.get("/console/?state=all").content.decode())


def test_the_default_queue_counts_only_staff_work_past_the_cap(reviewer_client, alice, big_order):
    bulk_previews(2, customer=alice, order_number="o-77")
    bulk_previews(2, customer=alice, order_number="o-77", status=PreviewStatus.EXECUTED)
    with CaptureQueriesContext(connection) as captured:
        assert reviewer_client.get("/console/").status_code == 200
    counting = [q["sql"] for q in captured.captured_queries if "COUNT(" in q["sql"] and "approvals_preview" in q["sql"]]
    assert len(counting) == 10  # the states staff work on together, then each of the nine others
    for sql in counting:
        bounded = f"LIMIT {selectors.STATE_COUNT_CAP + 1}" in sql
        staff_states_only = "IN ('awaiting_staff', 'needs_attention')" in sql
        assert bounded or staff_states_only, sql


def test_a_search_finds_by_part_of_the_number_the_customer_and_the_id(reviewer, alice, big_order):
    carol = UserFactory(username="carol", email="carol.smith@example.test")
    hers = bulk_previews(2, customer=carol, order_number="o-4417")
    alices = bulk_previews(1, customer=alice, order_number="o-77")
    executed = bulk_previews(1, customer=carol, order_number="o-4418", status=PreviewStatus.EXECUTED)

    def found(query, state=DEFAULT_STATE):
        queue = review_queue(user=reviewer, filters=QueueFilters(query=query, state=state))
        return {row.preview.pk for row in queue.rows}, {c.state: c.count for c in queue.counts}, queue

    rows, counts, queue = found("441")
    assert rows == {p.pk for p in hers}
    assert counts["awaiting_staff"] == 2 and counts["executed"] == 1 and counts["failed"] == 0
    assert not queue.search_capped and queue.total == 2 and queue.total_all == 3
    assert found("SMITH@example")[0] == {p.pk for p in hers}
    assert found("441", state="executed")[0] == {executed[0].pk}
    assert found(str(alices[0].pk))[0] == {alices[0].pk}
    assert found("no such thing")[0] == set()


def test_a_search_over_the_cap_says_so_and_still_lists_the_listed_state(
    reviewer_client, reviewer, alice, big_order, monkeypatch
):
    monkeypatch.setattr(selectors, "SEARCH_MATCH_CAP", 3)
    history = bulk_previews(5, customer=alice, order_number="o-77", status=PreviewStatus.EXECUTED)
    aged(history, days=3)  # older than the one waiting: a cap over every state could miss it
    waiting = bulk_previews(1, customer=alice, order_number="o-77")
    queue = review_queue(user=reviewer, filters=QueueFilters(query="o-77"))
    assert queue.search_capped and queue.total_all_at_least
    assert [row.preview.pk for row in queue.rows] == [waiting[0].pk]
    assert queue.total_all == 3 and all(c.at_least for c in queue.counts)
    page = text(reviewer_client.get("/console/?q=o-77").content.decode())
    assert "This search matches 3 previews or more" in page
    assert "At least 1 preview · waiting for staff review" in page
    narrow = review_queue(user=reviewer, filters=QueueFilters(query=str(waiting[0].pk)))
    assert not narrow.search_capped and [row.preview.pk for row in narrow.rows] == [waiting[0].pk]


@pytest.mark.postgres
def test_each_search_test_is_served_by_its_trigram_index(db):
    """The indexes' expressions are the SQL Django writes for `icontains` (else none would be used)."""
    from django.contrib.auth import get_user_model

    User = get_user_model()
    lookups = {
        "preview_subject_id_trgm": Preview.objects.filter(subject_id__icontains="S00289353"),
        "preview_recipient_trgm": Preview.objects.filter(payload__recipient__icontains="billing@"),
        "user_username_trgm": User.objects.filter(username__icontains="alice"),
        "user_email_trgm": User.objects.filter(email__icontains="example.test"),
    }
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # tiny tables: ask whether the index can serve it
        for index, queryset in lookups.items():
            sql, params = queryset.values("pk").query.sql_with_params()
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert f"Bitmap Index Scan on {index}" in plan, plan


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_search_is_planned_without_parallel_workers_and_leaves_the_connection_as_it_was(reviewer, alice):
    waiting = bulk_previews(1, customer=alice, order_number="o-4417")
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_parallel_workers_per_gather")
        before = cursor.fetchone()[0]
    with CaptureQueriesContext(connection) as queries:
        queue = review_queue(user=reviewer, filters=QueueFilters(query="4417"))
    assert [row.preview.pk for row in queue.rows] == [waiting[0].pk]
    statements = [q["sql"] for q in queries.captured_queries]
    assert statements[:2] == ["BEGIN", "SET LOCAL max_parallel_workers_per_gather = 0"]
    assert before != "0"
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_parallel_workers_per_gather")
        assert cursor.fetchone()[0] == before  # SET LOCAL ended with the search's transaction
    with CaptureQueriesContext(connection) as queries:
        review_queue(user=reviewer, filters=QueueFilters())
    assert not any("max_parallel_workers" in q["sql"] for q in queries.captured_queries)
