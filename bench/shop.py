"""A synthetic shop for the benchmark: thousands of customers and orders in several currencies, one
agent session per customer, and previews made ready for the commit and console measurements.

Everything is written with bulk_create (a few seconds for tens of thousands of rows). The rows are the
ones the application's own code would write; what the benchmark measures then goes through the real
code paths (HTTP, services, workers).
"""

from __future__ import annotations

import hashlib
import random
import secrets
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.utils import timezone

from approvals.core.services import TOKEN_PREFIX, agent_token_hash, preview_digest
from approvals.models import AgentSession, ApprovalRole, Preview, PreviewStatus
from refunds.models import Order, OrderStatus

# Currency, and the range of an order's total in its minor unit (EUR/USD/GBP cents, JPY yen, KWD fils).
CURRENCIES = [
    ("EUR", 1_000, 40_000),
    ("USD", 1_000, 40_000),
    ("GBP", 1_000, 30_000),
    ("JPY", 1_000, 50_000),
    ("KWD", 5_000, 120_000),
]
CURRENCY_WEIGHTS = [40, 30, 15, 10, 5]
STATUS_WEIGHTS = {
    OrderStatus.DELIVERED: 70,
    OrderStatus.SHIPPED: 10,
    OrderStatus.PENDING: 10,
    OrderStatus.CANCELLED: 10,
}
BATCH = 2000


@dataclass
class CustomerOrders:
    token: str
    delivered: list[tuple[str, int, bool]] = field(default_factory=list)  # (number, remaining, late applies)
    closed: list[str] = field(default_factory=list)  # pending, shipped or cancelled: not refundable


@dataclass
class Shop:
    customers: int
    orders: int
    sessions: int
    currencies: dict[str, int]
    sessions_file: Path
    sample_token: str


def _token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def load_shop(*, customers: int, orders_per_customer: int, sessions_file: Path, seed: int = 6) -> Shop:
    """Customers `bench-c00000`..., their orders `B0000000`..., one refund_order session each, and the
    file the wrk script reads (token, delivered orders with what remains, orders that are not refundable,
    another customer's order)."""
    rng = random.Random(seed)
    User = get_user_model()
    password = make_password("bench-customer-pass")  # hashed once; every customer gets the same hash
    users = User.objects.bulk_create(
        [
            User(username=f"bench-c{i:05d}", email=f"c{i:05d}@bench.example.test", password=password)
            for i in range(customers)
        ],
        batch_size=BATCH,
    )
    today = date.today()
    orders: list[Order] = []
    per_customer: list[CustomerOrders] = []
    currency_counts: dict[str, int] = {}
    statuses, status_weights = list(STATUS_WEIGHTS), list(STATUS_WEIGHTS.values())
    for user in users:
        entry = CustomerOrders(token=_token())
        for k in range(orders_per_customer):
            currency, low, high = rng.choices(CURRENCIES, CURRENCY_WEIGHTS)[0]
            currency_counts[currency] = currency_counts.get(currency, 0) + 1
            total = rng.randint(low, high)
            # Every customer has at least one delivered order, so that every session has valid proposals.
            status = OrderStatus.DELIVERED if k == 0 else rng.choices(statuses, status_weights)[0]
            placed = today - timedelta(days=rng.randint(15, 120))
            delivered = placed + timedelta(days=rng.randint(1, 14)) if status == OrderStatus.DELIVERED else None
            refunded = rng.choice([0, 0, 0, total // 4, total // 2]) if status == OrderStatus.DELIVERED else 0
            number = f"B{len(orders):07d}"
            orders.append(
                Order(
                    number=number,
                    customer=user,
                    currency=currency,
                    total_minor=total,
                    refunded_minor=refunded,
                    status=status,
                    placed_at=placed,
                    delivered_at=delivered,
                    payment_ref=f"pi_{number.lower()}",
                )
            )
            if status == OrderStatus.DELIVERED:
                entry.delivered.append((number, total - refunded, (delivered - placed).days > 7))
            else:
                entry.closed.append(number)
        per_customer.append(entry)
    Order.objects.bulk_create(orders, batch_size=BATCH)

    expires = timezone.now() + timedelta(days=1)
    AgentSession.objects.bulk_create(
        [
            AgentSession(
                token_hash=agent_token_hash(entry.token),
                token_prefix=entry.token[:12],
                user=user,
                tools=["refund_order"],
                label="bench",
                expires_at=expires,
            )
            for user, entry in zip(users, per_customer, strict=True)
        ],
        batch_size=BATCH,
    )
    with sessions_file.open("w") as out:
        for i, entry in enumerate(per_customer):
            foreign = per_customer[(i + 1) % len(per_customer)].delivered[0][0]
            delivered = ",".join(f"{n}:{remaining}:{int(late)}" for n, remaining, late in entry.delivered)
            out.write(f"{entry.token}\t{delivered}\t{','.join(entry.closed)}\t{foreign}\n")
    return Shop(
        customers=len(users),
        orders=len(orders),
        sessions=len(users),
        currencies=currency_counts,
        sessions_file=sessions_file,
        sample_token=per_customer[0].token,
    )


def reviewer() -> Any:
    """A staff member in `Refund reviewers` (the group comes from a data migration)."""
    User = get_user_model()
    person = User.objects.create(
        username="bench-reviewer",
        email="reviewer@bench.example.test",
        is_staff=True,
        password=make_password("bench-reviewer-pass"),
    )
    person.groups.add(Group.objects.get(name="Refund reviewers"))
    return person


def previews_for(
    *,
    label: str,
    count: int,
    status: PreviewStatus = PreviewStatus.AWAITING_CUSTOMER,
    amount_minor: int = 500,
    currency: str = "EUR",
) -> list[Preview]:
    """`count` previews exactly as proposal_submit writes them, each on a fresh delivered order of its own
    (orders `<label>-000001`...), spread over the bench customers. AWAITING_STAFF ones are above the
    staff threshold and carry their customer's confirmation in their status (the console's queue)."""
    User = get_user_model()
    customers = list(User.objects.filter(username__startswith="bench-c").order_by("pk")[:1000])
    sessions = {s.user_id: s for s in AgentSession.objects.filter(user__in=customers, label="bench")}
    today = date.today()
    orders = Order.objects.bulk_create(
        [
            Order(
                number=f"{label}-{i:06d}",
                customer=customers[i % len(customers)],
                currency=currency,
                total_minor=amount_minor * 10,
                status=OrderStatus.DELIVERED,
                placed_at=today - timedelta(days=20),
                delivered_at=today - timedelta(days=10),
                payment_ref=f"pi_{label.lower()}_{i}",
            )
            for i in range(count)
        ],
        batch_size=BATCH,
    )
    required = [ApprovalRole.CUSTOMER.value]
    if status == PreviewStatus.AWAITING_STAFF:
        required.append(ApprovalRole.STAFF.value)
    expires = timezone.now() + timedelta(hours=2)
    previews = []
    for order in orders:
        payload = {"order_id": order.number, "amount_minor": amount_minor, "currency": currency, "reason": "damaged"}
        preview = Preview(
            action="refund_order",
            actor=order.customer,
            agent_session=sessions.get(order.customer_id),
            subject_type="order",
            subject_id=order.number,
            subject_version=order.version,
            payload=payload,
            amount_minor=amount_minor,
            currency=currency,
            required_approvals=required,
            status=status,
            expires_at=expires,
            proposal_key=hashlib.sha256(f"bench:{order.number}".encode()).hexdigest(),
        )
        preview.digest = preview_digest(preview)
        previews.append(preview)
    return Preview.objects.bulk_create(previews, batch_size=BATCH)
