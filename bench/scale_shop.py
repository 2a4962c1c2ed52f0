"""A shop with a history of `rows` rows per table, written with COPY, for `make bench-scale`.

At each size the shop has `rows` orders, `rows` previews and `rows` audit records, a customer per four
orders (with an agent session each), and for its history what the application would have written: a
customer's approval, an execution and a ledger refund for each executed preview, and half as many
idempotency records as previews. What waits for a person does not grow with the history: the same number
of previews waits for staff and for customers at every size (a queue is as long as the reviewers are
behind, not as old as the shop), so that what grows is what a growing shop accumulates.

The rows are those the services write (the waiting previews' digests are the real ones, so that staff
could decide them), except where nothing measured reads them: the history's digests are random, and its
audit records (one `proposed` record per preview) are not sealed. The rows are written as COPY text,
formatted here (no value holds a tab, a newline or a backslash), with foreign-key triggers off
(`session_replication_role = replica`): the loader writes consistent rows, and checking millions of
references one by one would take longer than writing them.
"""

from __future__ import annotations

import base64
import hashlib
import random
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import connection, transaction

from approvals.core.services import TOKEN_PREFIX, agent_token_hash, preview_digest
from approvals.models import AgentSession, Approval, AuditRecord, Execution, IdempotencyRecord, Preview, PreviewStatus
from refunds.models import Order, OrderStatus, Refund

ORDERS_PER_CUSTOMER = 4
WAITING_EACH = 500  # previews waiting for staff, and as many for their customer, at every size
PROBES = 200  # customers with no history, whose agents propose during the measurements (40 a round)
HISTORY_STATUSES = {
    PreviewStatus.EXECUTED: 55,
    PreviewStatus.EXPIRED: 20,
    PreviewStatus.DECLINED: 10,
    PreviewStatus.SUPERSEDED: 5,
    PreviewStatus.REJECTED: 5,
    PreviewStatus.FAILED: 5,
}
APPROVED_BY_CUSTOMER = {PreviewStatus.EXECUTED, PreviewStatus.FAILED, PreviewStatus.REJECTED}
ORDER_STATUSES = {
    OrderStatus.DELIVERED: 70,
    OrderStatus.SHIPPED: 10,
    OrderStatus.PENDING: 10,
    OrderStatus.CANCELLED: 10,
}
CURRENCIES = {"EUR": 50, "USD": 35, "GBP": 15}
STAFF_AMOUNT = 25_000  # above the default EUR staff review threshold
PREVIEW_TTL = timedelta(minutes=15)
NULL = "\\N"


@dataclass(frozen=True)
class Probe:
    username: str
    token: str
    order_number: str  # delivered, in EUR, nothing refunded, no preview yet


@dataclass
class ScaledShop:
    rows: int
    counts: dict[str, int] = field(default_factory=dict)
    probes: list[Probe] = field(default_factory=list)
    history_customer: str = ""  # a customer with orders, refunds and a waiting preview: the orders page
    search_term: str = ""  # the order number of a preview waiting for staff

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "probes": [asdict(probe) for probe in self.probes]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScaledShop:
        return cls(**{**data, "probes": [Probe(**probe) for probe in data["probes"]]})


@dataclass
class _Plan:
    """Who has which order and what the history did to each, decided before any row is written, so that
    an order's refunded amount is the sum of its refunds."""

    now: datetime
    customers: int
    order_currency: list[str]
    order_status: list[str]
    order_total: list[int]
    order_placed: list[date]
    refunded: list[int]
    preview_ids: list[str]
    preview_order: list[int]
    preview_status: list[str]
    preview_amount: list[int]
    preview_created: list[datetime]
    waiting_digests: dict[int, str]  # preview number -> its real digest (the waiting ones)

    @property
    def history(self) -> int:
        return len(self.preview_order) - len(self.waiting_digests)


def _plan(rows: int, seed: int) -> _Plan:
    rng = random.Random(seed)
    now = datetime.now(UTC)
    customers = max(rows // ORDERS_PER_CUSTOMER, 2 * PROBES)
    orders = customers * ORDERS_PER_CUSTOMER
    order_currency = rng.choices(list(CURRENCIES), list(CURRENCIES.values()), k=orders)
    order_status = rng.choices(list(ORDER_STATUSES), list(ORDER_STATUSES.values()), k=orders)
    for first in range(0, orders, ORDERS_PER_CUSTOMER):  # every customer's first order: delivered, in EUR
        order_currency[first], order_status[first] = "EUR", OrderStatus.DELIVERED
    order_total = [rng.randint(5_000, 60_000) for _ in range(orders)]
    order_placed = [now.date() - timedelta(days=rng.randint(15, 400)) for _ in range(orders)]
    # The probes are the last customers: no preview is on their orders.
    delivered = [
        o for o in range((customers - PROBES) * ORDERS_PER_CUSTOMER) if order_status[o] == OrderStatus.DELIVERED
    ]
    waiting = 2 * min(WAITING_EACH, max(rows // 20, 1))
    history = max(rows - waiting, 0)
    preview_order = [delivered[p % len(delivered)] for p in range(history + waiting)]
    preview_status = rng.choices(list(HISTORY_STATUSES), list(HISTORY_STATUSES.values()), k=history)
    preview_status += [PreviewStatus.AWAITING_STAFF] * (waiting // 2)
    preview_status += [PreviewStatus.AWAITING_CUSTOMER] * (waiting - waiting // 2)
    per_order = -(-history // len(delivered))  # at most this many history previews on one order
    preview_amount = [max(100, order_total[o] // (2 * per_order + 1)) for o in preview_order[:history]]
    preview_amount += [STAFF_AMOUNT] * (waiting // 2) + [500] * (waiting - waiting // 2)
    refunded = [0] * orders
    for p in range(history):
        if preview_status[p] == PreviewStatus.EXECUTED:
            refunded[preview_order[p]] += preview_amount[p]
    start, span = now - timedelta(days=366), timedelta(days=365)
    preview_created = [start + span * (p / max(history, 1)) for p in range(history)]
    preview_created += [now - timedelta(minutes=60) + timedelta(seconds=3 * w) for w in range(waiting)]
    preview_ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in preview_order]
    plan = _Plan(
        now,
        customers,
        order_currency,
        order_status,
        order_total,
        order_placed,
        refunded,
        preview_ids,
        preview_order,
        preview_status,
        preview_amount,
        preview_created,
        {},
    )
    plan.waiting_digests = dict.fromkeys(range(history, history + waiting), "")  # filled in once ids are known
    return plan


def _number(order: int) -> str:
    return f"S{order:08d}"


def _payload(order: int, amount: int, currency: str) -> dict[str, Any]:
    return {"order_id": _number(order), "amount_minor": amount, "currency": currency, "reason": "damaged"}


def _required(for_staff: bool) -> list[str]:
    return ["customer", "staff"] if for_staff else ["customer"]


def _token(seed: int, customer: int) -> str:
    raw = hashlib.sha256(f"bench-scale:{seed}:{customer}".encode()).digest()
    return TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _first_id(model: Any) -> int:
    """The first free id of a table (the template's data migrations may have written rows)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {model._meta.db_table}")
        return int(cursor.fetchone()[0])


def copy_lines(model: Any, columns: list[str], lines: Iterable[str], *, chunk: int = 4000) -> int:
    """COPY lines of COPY text (tab-separated, `\\N` for NULL, newline-terminated) into a model's table."""
    table = connection.ops.quote_name(model._meta.db_table)
    names = ", ".join(connection.ops.quote_name(name) for name in columns)
    written, pending = 0, []
    with connection.cursor() as cursor, cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
        for line in lines:
            pending.append(line)
            if len(pending) >= chunk:
                copy.write("".join(pending))
                written += len(pending)
                pending = []
        if pending:
            copy.write("".join(pending))
            written += len(pending)
    return written


def load_scaled_shop(rows: int, *, seed: int = 35, progress: Callable[[str], None] = print) -> ScaledShop:
    """Write the shop of `rows` rows per table (the module's docstring says what it holds)."""
    plan = _plan(rows, seed)
    User = get_user_model()
    ids = {model: _first_id(model) for model in (User, Order, AgentSession, Approval, Refund, AuditRecord)}
    ids[IdempotencyRecord] = _first_id(IdempotencyRecord)
    writer = _Lines(plan, ids, seed)
    for p in plan.waiting_digests:
        plan.waiting_digests[p] = writer.real_digest(p)
    shop = ScaledShop(rows=rows)
    counts = shop.counts
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
        progress(f"{plan.customers:,} customers and their agent sessions")
        counts["customers"] = copy_lines(User, USER_COLUMNS, writer.users())
        copy_lines(AgentSession, SESSION_COLUMNS, writer.sessions())
        progress(f"{len(plan.order_status):,} orders")
        counts["orders"] = copy_lines(Order, ORDER_COLUMNS, writer.orders())
        progress(f"{len(plan.preview_order):,} previews ({len(plan.waiting_digests):,} waiting for a person)")
        counts["previews"] = copy_lines(Preview, PREVIEW_COLUMNS, writer.previews())
        counts["waiting_for_staff"] = plan.preview_status.count(PreviewStatus.AWAITING_STAFF)
        counts["waiting_for_customer"] = plan.preview_status.count(PreviewStatus.AWAITING_CUSTOMER)
        progress("approvals, executions, ledger refunds")
        counts["approvals"] = copy_lines(Approval, APPROVAL_COLUMNS, writer.approvals())
        counts["executions"] = copy_lines(Execution, EXECUTION_COLUMNS, writer.executions())
        counts["refunds"] = copy_lines(Refund, REFUND_COLUMNS, writer.refunds())
        progress(f"{len(plan.preview_order):,} audit records, {len(plan.preview_order) // 2:,} idempotency records")
        counts["audit_records"] = copy_lines(AuditRecord, AUDIT_COLUMNS, writer.audit_records())
        counts["idempotency_records"] = copy_lines(IdempotencyRecord, IDEMPOTENCY_COLUMNS, writer.idempotency())
        with connection.cursor() as cursor:
            for model in (User, Order, AgentSession, Approval, Refund, AuditRecord, IdempotencyRecord):
                table = model._meta.db_table
                cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT MAX(id) FROM {table}))")
    probes = range(plan.customers - PROBES, plan.customers)
    shop.probes = [Probe(f"scale-c{c:07d}", _token(seed, c), _number(c * ORDERS_PER_CUSTOMER)) for c in probes]
    staff = plan.preview_status.index(PreviewStatus.AWAITING_STAFF)
    shop.search_term = _number(plan.preview_order[staff])
    shop.history_customer = f"scale-c{plan.preview_order[staff] // ORDERS_PER_CUSTOMER:07d}"
    return shop


USER_COLUMNS = ["id", "password", "is_superuser", "username", "first_name", "last_name", "email", "is_staff"]
USER_COLUMNS += ["is_active", "date_joined"]
SESSION_COLUMNS = ["id", "token_hash", "token_prefix", "tools", "label", "created_at", "expires_at", "user_id"]
SESSION_COLUMNS += ["webhook_secret", "webhook_url"]
ORDER_COLUMNS = ["id", "number", "currency", "total_minor", "refunded_minor", "status", "placed_at", "delivered_at"]
ORDER_COLUMNS += ["payment_ref", "version", "created_at", "updated_at", "customer_id"]
PREVIEW_COLUMNS = ["id", "action", "subject_type", "subject_id", "subject_version", "payload", "amount_minor"]
PREVIEW_COLUMNS += ["currency", "proposal_key", "digest", "required_approvals", "status", "created_at", "expires_at"]
PREVIEW_COLUMNS += ["status_changed_at", "failure_code", "failure_reason", "result", "executed_at", "actor_id"]
PREVIEW_COLUMNS += ["agent_session_id", "proposed_by_id", "staff_approvals_needed", "origin"]
APPROVAL_COLUMNS = ["id", "role", "basis", "digest", "subject_version", "created_at", "approver_id", "preview_id"]
APPROVAL_COLUMNS += ["lapsed_at", "lapsed_reason"]
EXECUTION_COLUMNS = ["preview_id", "outcome", "attempt", "fencing_token", "lease_owner", "effect_possible"]
EXECUTION_COLUMNS += ["effect", "code", "detail", "deadline", "created_at", "updated_at"]
REFUND_COLUMNS = ["id", "amount_minor", "currency", "reason", "gateway_refund_id", "created_at", "order_id"]
REFUND_COLUMNS += ["preview_id", "status", "status_reason"]
AUDIT_COLUMNS = ["id", "created_at", "event", "action", "subject_type", "subject_id", "raw_arguments"]
AUDIT_COLUMNS += ["approval_basis", "result", "actor_id", "agent_session_id", "preview_id"]
IDEMPOTENCY_COLUMNS = ["id", "key", "request_fingerprint", "response_status", "response_body", "created_at"]
IDEMPOTENCY_COLUMNS += ["agent_session_id"]


class _Lines:
    """The COPY text lines of each table, computed from the plan (one pass per table)."""

    def __init__(self, plan: _Plan, ids: dict[Any, int], seed: int) -> None:
        self.plan, self.seed = plan, seed
        User = get_user_model()
        self.user_id, self.session_id, self.order_id = ids[User], ids[AgentSession], ids[Order]
        self.approval_id, self.refund_id, self.audit_id = ids[Approval], ids[Refund], ids[AuditRecord]
        self.idempotency_id = ids[IdempotencyRecord]

    def _customer(self, p: int) -> int:
        return self.plan.preview_order[p] // ORDERS_PER_CUSTOMER

    def _digest(self, p: int) -> str:
        return self.plan.waiting_digests.get(p) or hashlib.sha256(b"digest %d" % p).hexdigest()

    def _expires(self, p: int) -> datetime:
        if p in self.plan.waiting_digests:
            return self.plan.now + timedelta(days=1)
        return self.plan.preview_created[p] + PREVIEW_TTL

    def real_digest(self, p: int) -> str:
        plan, order = self.plan, self.plan.preview_order[p]
        preview = Preview(
            id=uuid.UUID(plan.preview_ids[p]),
            action="refund_order",
            actor_id=self.user_id + self._customer(p),
            subject_type="order",
            subject_id=_number(order),
            subject_version=1,
            payload=_payload(order, plan.preview_amount[p], "EUR"),
            amount_minor=plan.preview_amount[p],
            currency="EUR",
            required_approvals=_required(plan.preview_status[p] == PreviewStatus.AWAITING_STAFF),
            expires_at=self._expires(p),
        )
        return preview_digest(preview)

    def users(self) -> Iterator[str]:
        password = make_password("bench-customer-pass")  # one hash for every customer
        joined = str(self.plan.now - timedelta(days=400))
        for c in range(self.plan.customers):
            name = f"scale-c{c:07d}"
            yield f"{self.user_id + c}\t{password}\tf\t{name}\t\t\t{name}@scale.example.test\tf\tt\t{joined}\n"

    def sessions(self) -> Iterator[str]:
        created, expires = str(self.plan.now - timedelta(days=1)), str(self.plan.now + timedelta(days=30))
        for c in range(self.plan.customers):
            token = _token(self.seed, c)
            yield (
                f'{self.session_id + c}\t{agent_token_hash(token)}\t{token[:12]}\t["refund_order"]\tbench\t{created}\t'
                f"{expires}\t{self.user_id + c}\t\t\n"
            )

    def orders(self) -> Iterator[str]:
        plan, now = self.plan, str(self.plan.now)
        after = [timedelta(days=1 + d) for d in range(14)]
        for o, status in enumerate(plan.order_status):
            placed = plan.order_placed[o]
            delivered = placed + after[o % 14] if status == OrderStatus.DELIVERED else NULL
            yield (
                f"{self.order_id + o}\t{_number(o)}\t{plan.order_currency[o]}\t{plan.order_total[o]}\t"
                f"{plan.refunded[o]}\t{status}\t{placed}\t{delivered}\tpi_s{o:08d}\t1\t{now}\t{now}\t"
                f"{self.user_id + o // ORDERS_PER_CUSTOMER}\n"
            )

    def previews(self) -> Iterator[str]:
        plan = self.plan
        for p, order in enumerate(plan.preview_order):
            status, amount, created = plan.preview_status[p], plan.preview_amount[p], plan.preview_created[p]
            currency = "EUR" if p in plan.waiting_digests else plan.order_currency[order]
            customer = self._customer(p)
            number = _number(order)
            executed, failed = status == PreviewStatus.EXECUTED, status == PreviewStatus.FAILED
            changed = created + timedelta(minutes=2)
            result = (
                f'{{"currency":"{currency}","order_id":"{number}","refund_id":"lr_scale_{p}",'
                f'"amount_minor":{amount},"refund_status":"succeeded"}}'
                if executed
                else NULL
            )
            required = '["customer","staff"]' if status == PreviewStatus.AWAITING_STAFF else '["customer"]'
            failure = "provider_refused\tRefused by the provider." if failed else "\t"
            yield (
                f"{plan.preview_ids[p]}\trefund_order\torder\t{number}\t1\t"
                f'{{"order_id":"{number}","amount_minor":{amount},"currency":"{currency}","reason":"damaged"}}\t'
                f"{amount}\t{currency}\t{hashlib.sha256(b'key %d' % p).hexdigest()}\t{self._digest(p)}\t{required}\t"
                f"{status}\t{created}\t{self._expires(p)}\t{changed}\t{failure}\t{result}\t"
                f"{changed if executed else NULL}\t{self.user_id + customer}\t{self.session_id + customer}\t"
                f"{self.user_id + customer}\t1\tagent\n"
            )

    def approvals(self) -> Iterator[str]:
        plan, n = self.plan, 0
        for p, status in enumerate(plan.preview_status):
            if status in APPROVED_BY_CUSTOMER or status == PreviewStatus.AWAITING_STAFF:
                approved = plan.preview_created[p] + timedelta(minutes=1)
                customer = self.user_id + self._customer(p)
                yield (
                    f"{self.approval_id + n}\tcustomer\t\t{self._digest(p)}\t1\t{approved}\t{customer}\t"
                    f"{plan.preview_ids[p]}\t{NULL}\t\n"
                )
                n += 1

    def executions(self) -> Iterator[str]:
        plan = self.plan
        for p, status in enumerate(plan.preview_status):
            if status not in (PreviewStatus.EXECUTED, PreviewStatus.FAILED):
                continue
            created = plan.preview_created[p]
            executed = status == PreviewStatus.EXECUTED
            currency = plan.order_currency[plan.preview_order[p]]
            effect = (
                f'{{"currency":"{currency}","refund_id":"lr_scale_{p}","amount_minor":{plan.preview_amount[p]}}}'
                if executed
                else NULL
            )
            outcome, code = ("succeeded", "") if executed else ("failed_after_check", "provider_refused")
            yield (
                f"{plan.preview_ids[p]}\t{outcome}\t1\t1\t\t{'t' if executed else 'f'}\t{effect}\t{code}\t\t"
                f"{created + timedelta(days=1)}\t{created + timedelta(minutes=1)}\t{created + timedelta(minutes=2)}\n"
            )

    def refunds(self) -> Iterator[str]:
        plan, n = self.plan, 0
        for p, status in enumerate(plan.preview_status):
            if status == PreviewStatus.EXECUTED:
                order = plan.preview_order[p]
                yield (
                    f"{self.refund_id + n}\t{plan.preview_amount[p]}\t{plan.order_currency[order]}\tdamaged\t"
                    f"lr_scale_{p}\t{plan.preview_created[p] + timedelta(minutes=2)}\t{self.order_id + order}\t"
                    f"{plan.preview_ids[p]}\tsucceeded\t\n"
                )
                n += 1

    def audit_records(self) -> Iterator[str]:
        plan = self.plan
        for p, order in enumerate(plan.preview_order):
            number, amount, customer = _number(order), plan.preview_amount[p], self._customer(p)
            yield (
                f"{self.audit_id + p}\t{plan.preview_created[p]}\tproposed\trefund_order\torder\t{number}\t"
                f'{{"order_id": "{number}", "amount_minor": {amount}, "reason": "damaged"}}\t{NULL}\t'
                f'{{"digest":"{self._digest(p)}","status":"awaiting_customer"}}\t{self.user_id + customer}\t'
                f"{self.session_id + customer}\t{plan.preview_ids[p]}\n"
            )

    def idempotency(self) -> Iterator[str]:
        plan = self.plan
        for n, p in enumerate(range(0, len(plan.preview_order), 2)):
            yield (
                f"{self.idempotency_id + n}\tscale-{p}\t{hashlib.sha256(b'call %d' % p).hexdigest()}\t201\t"
                f'{{"ok":true,"status":"awaiting_customer","preview":{{"id":"{plan.preview_ids[p]}"}}}}\t'
                f"{plan.preview_created[p]}\t{self.session_id + self._customer(p)}\n"
            )
