"""A local Stripe-compatible test server for refunds: stdlib only, 127.0.0.1, no network.

It speaks enough of the v1 API for the official `stripe` package (`POST /v1/refunds` with form-encoded
parameters, `GET /v1/refunds[/<id>]`) and copies the semantics our adapter relies on
(docs.stripe.com/api/idempotent_requests, docs.stripe.com/error-codes):

* the response of a request that reached the endpoint is saved under its `Idempotency-Key` and a
  replay gets the same status and body (with `Idempotent-Replayed: true`); a key reused with other
  parameters is a 400 `idempotency_error`; requests that fail validation are not saved;
* payment intents have an amount, a currency and what is already refunded; a refund above what
  remains is a 400 `invalid_request_error` on `param=amount` without a `code`, "Refund amount ($X)
  is greater than unrefunded amount on charge ($Y)"; a fully refunded one is `charge_already_refunded`.

Faults the tests can queue, each consumed by the next `POST /v1/refunds` (in the order queued):

* `fail_next(n, status=500)`: answer 5xx/429 before the endpoint runs (nothing saved, the
  key stays free, like an error at the load balancer); with `saved=True` the 500 is saved under the
  key, as Stripe does for a 500 once the endpoint started, so every replay is that 500 again;
* `conflict_next(n)`: 409 `idempotency_key_in_use`, as for a concurrent request with the same key;
* `time_out_next(n, seconds)`: run the endpoint (the refund is made and its answer saved), then
  wait `seconds` before answering, past the client's timeout: the answer is lost;
* `refuse_next(code, ...)`: refuse with a Stripe error code such as `charge_already_refunded`
  (saved under the key, like any answer of the endpoint).

`fail_lookups(status)` answers every `GET /v1/refunds` (the executor's lookup) with that 5xx until
`fail_lookups(None)`.

Charges (https://docs.stripe.com/api/charges/list): `GET /v1/charges?payment_intent=…` lists the payment
intent's charges, newest first and paged like refunds: the succeeded one carries the intent's `amount`,
`amount_captured` and `amount_refunded` (what its live refunds take); `add_failed_charge(pi)` adds a
declined attempt (nothing captured). `fail_charge_reads(n, status=503)` answers the next `n` charge
reads with that status (`n=None`: every one until `fail_charge_reads(0)`); `refuse_charge_reads(status)`
answers every one with a 4xx such as 401 until `refuse_charge_reads(None)`.

`refunds` holds the refunds actually created, `requests` every request received.

Refund lifecycle and events (https://docs.stripe.com/api/events, https://docs.stripe.com/webhooks):

* `refund_status = "pending"` makes new refunds pending at the bank (with a `pending_reason`);
* `set_refund_status(refund_id, "failed", failure_reason=...)` moves a refund on as the bank would
  (a failed or canceled refund no longer counts against the PaymentIntent) and queues the event
  Stripe sends (`refund.updated`, or `refund.failed`);
* `refund_outside(payment_intent, amount)` is a refund made in Stripe's dashboard (no metadata);
* every change queues its event in `events` (`refund.created` for each refund made);
* `signed(event, secret)` gives the body and the `Stripe-Signature` header Stripe would send
  (`t=<time>,v1=<HMAC-SHA256(secret, "<t>.<body>")>`), `send_event(url, event, secret)` POSTs it.

`GET /v1/refunds` pages like Stripe (`limit`, `starting_after`, `has_more`, newest first); set
`page_size` to cap a page below the asked `limit`, so that a client must follow the pages.

Run it on its own with `python -m tests.refunds.fake_stripe [--port N] [--payment-intent pi_x:1000:eur ...]`.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import hmac
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.error import HTTPError
from urllib.parse import parse_qsl, urlsplit
from urllib.request import Request, urlopen

DEFAULT_MESSAGES = {
    "charge_already_refunded": "Charge {charge} has already been refunded.",
    "charge_disputed": "Charge {charge} has been charged back; cannot issue a refund.",
    "charge_not_refundable": "Charge {charge} cannot be refunded.",
    "amount_too_large": "Amount must be no more than $999,999.99",
}
REFUND_PARAMS = {"payment_intent", "charge", "amount", "reason", "currency"}
REFUND_PARAM_PREFIXES = ("metadata[", "expand[")


@dataclass
class PaymentIntent:
    id: str
    amount: int
    currency: str
    refunded: int = 0
    charge: str = field(default_factory=lambda: "ch_" + secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))
    failed_charges: list[dict[str, Any]] = field(default_factory=list)

    def charges(self) -> list[dict[str, Any]]:
        """Every charge of the intent, newest first (the declined attempts added after it list first)."""
        succeeded = {
            "id": self.charge,
            "object": "charge",
            "amount": self.amount,
            "amount_captured": self.amount,
            "amount_refunded": self.refunded,
            "captured": True,
            "created": self.created,
            "currency": self.currency,
            "payment_intent": self.id,
            "refunded": self.refunded >= self.amount,
            "status": "succeeded",
        }
        return [*self.failed_charges[::-1], succeeded]

    @property
    def unrefunded(self) -> int:
        return self.amount - self.refunded


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    params: dict[str, str]
    status: int = 0
    body: dict[str, Any] = field(default_factory=dict)
    replayed: bool = False

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get("idempotency-key")


@dataclass
class Fault:
    kind: str  # "error" | "conflict" | "timeout" | "refuse" | "saved_error"
    status: int = 500
    seconds: float = 0.0
    code: str = ""
    message: str = ""
    param: str = ""
    type: str = "invalid_request_error"

    @property
    def before_endpoint(self) -> bool:
        return self.kind in ("error", "conflict")


@dataclass
class Saved:
    fingerprint: tuple
    status: int
    body: dict[str, Any]


class FakeStripe:
    """The server and its state. Use as a context manager, or `start()` and `stop()`."""

    def __init__(self, *, api_key: str = "sk_test_x", host: str = "127.0.0.1", port: int = 0) -> None:
        self.api_key = api_key
        self.payment_intents: dict[str, PaymentIntent] = {}
        self.refunds: list[dict[str, Any]] = []
        self.requests: list[RecordedRequest] = []
        self.refund_status = "succeeded"
        self.lookup_failure: int | None = None
        self.page_size: int | None = None
        self.charge_read_failures: int | None = 0  # how many charge reads fail next (None: all of them)
        self.charge_read_status = 503
        self.charge_read_refusal: int | None = None
        self.events: list[dict[str, Any]] = []
        self._saved: dict[str, Saved] = {}
        self._faults: collections.deque[Fault] = collections.deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._host = host
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # Lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._server.server_port}"

    def start(self) -> FakeStripe:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-stripe", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()  # wakes handlers that are "timing out"
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeStripe:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # Configuration -------------------------------------------------------------------------

    def add_payment_intent(self, id: str, *, amount: int, currency: str = "eur", refunded: int = 0) -> PaymentIntent:
        with self._lock:
            intent = PaymentIntent(id=id, amount=amount, currency=currency.lower(), refunded=refunded)
            self.payment_intents[id] = intent
            return intent

    def fail_next(self, n: int = 1, *, status: int = 500, saved: bool = False) -> None:
        self._queue(n, Fault(kind="saved_error" if saved else "error", status=status))

    def conflict_next(self, n: int = 1) -> None:
        self._queue(n, Fault(kind="conflict", status=409))

    def time_out_next(self, n: int = 1, *, seconds: float = 2.0) -> None:
        self._queue(n, Fault(kind="timeout", seconds=seconds))

    def refuse_next(
        self,
        code: str,
        n: int = 1,
        *,
        message: str = "",
        param: str = "",
        status: int = 400,
        type: str = "invalid_request_error",
    ) -> None:
        self._queue(n, Fault(kind="refuse", code=code, message=message, param=param, status=status, type=type))

    def fail_lookups(self, status: int | None = 503) -> None:
        self.lookup_failure = status

    def add_failed_charge(self, payment_intent: str) -> dict[str, Any]:
        """A declined attempt at paying the intent: it lists among its charges, nothing captured."""
        with self._lock:
            intent = self.payment_intents[payment_intent]
            charge = {
                "id": "ch_" + secrets.token_hex(12),
                "object": "charge",
                "amount": intent.amount,
                "amount_captured": 0,
                "amount_refunded": 0,
                "captured": False,
                "created": int(time.time()),
                "currency": intent.currency,
                "payment_intent": intent.id,
                "refunded": False,
                "status": "failed",
            }
            intent.failed_charges.append(charge)
            return charge

    def fail_charge_reads(self, n: int | None = 1, *, status: int = 503) -> None:
        self.charge_read_failures, self.charge_read_status = n, status

    def refuse_charge_reads(self, status: int | None = 401) -> None:
        self.charge_read_refusal = status

    def charge_reads(self) -> list[RecordedRequest]:
        return [r for r in self.requests if (r.method, r.path) == ("GET", "/v1/charges")]

    def _queue(self, n: int, fault: Fault) -> None:
        with self._lock:
            self._faults.extend([fault] * n)

    # Refund lifecycle and events ----------------------------------------------------------

    def refund(self, refund_id: str) -> dict[str, Any]:
        return next(refund for refund in self.refunds if refund["id"] == refund_id)

    def set_refund_status(
        self, refund_id: str, status: str, *, failure_reason: str | None = None, pending_reason: str | None = None
    ) -> dict[str, Any]:
        """Move a refund to `status` as the bank would; returns the event Stripe sends (also queued)."""
        with self._lock:
            refund = self.refund(refund_id)
            intent = self.payment_intents[refund["payment_intent"]]
            was_live = refund["status"] not in ("failed", "canceled")
            is_live = status not in ("failed", "canceled")
            if was_live and not is_live:
                intent.refunded -= refund["amount"]
            elif is_live and not was_live:
                intent.refunded += refund["amount"]
            refund["status"] = status
            refund["failure_reason"] = failure_reason if status == "failed" else None
            refund["pending_reason"] = pending_reason if status == "pending" else None
            return self._event("refund.failed" if status == "failed" else "refund.updated", refund)

    def refund_outside(self, payment_intent: str, amount: int, *, status: str = "succeeded") -> dict[str, Any]:
        """A refund made in Stripe's dashboard: no idempotency key, no metadata of ours."""
        with self._lock:
            intent = self.payment_intents[payment_intent]
            refund = self._refund_object(intent, amount, metadata={}, reason=None, status=status)
            if status not in ("failed", "canceled"):
                intent.refunded += amount
            self.refunds.append(refund)
            self._event("refund.created", refund)
            return refund

    def _event(self, event_type: str, obj: dict[str, Any]) -> dict[str, Any]:
        event = {
            "id": "evt_" + secrets.token_hex(12),
            "object": "event",
            "api_version": "2024-06-20",
            "created": int(time.time()),
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": event_type,
            "data": {"object": json.loads(json.dumps(obj))},
        }
        self.events.append(event)
        return event

    def events_for(self, refund_id: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["data"]["object"].get("id") == refund_id]

    @staticmethod
    def signed(event: dict[str, Any], secret: str, *, timestamp: int | None = None) -> tuple[bytes, str]:
        """The body and the Stripe-Signature header Stripe sends with `event`."""
        body = json.dumps(event, indent=2)
        stamp = int(time.time()) if timestamp is None else timestamp
        signature = hmac.new(secret.encode(), f"{stamp}.{body}".encode(), hashlib.sha256).hexdigest()
        return body.encode(), f"t={stamp},v1={signature}"

    def send_event(
        self, url: str, event: dict[str, Any], secret: str, *, timestamp: int | None = None
    ) -> tuple[int, dict[str, Any]]:
        """POST the signed event to a webhook endpoint, as Stripe does; returns (status, JSON body)."""
        body, header = self.signed(event, secret, timestamp=timestamp)
        request = Request(
            url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json; charset=utf-8",
                "Stripe-Signature": header,
                "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
            },
        )
        try:
            with urlopen(request, timeout=10) as response:  # noqa: S310 - a test's own server
                return response.status, json.loads(response.read() or b"{}")
        except HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    # What happened -------------------------------------------------------------------------

    @property
    def refunds_created(self) -> int:
        return len(self.refunds)

    def refund_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if (r.method, r.path) == ("POST", "/v1/refunds")]

    # Requests ------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], raw_body: bytes) -> tuple[int, dict, dict]:
        """Answer one request: (status, JSON body, extra headers). May sleep (a time-out fault)."""
        params = dict(parse_qsl(raw_body.decode("utf-8"), keep_blank_values=True)) if raw_body else {}
        if method == "GET":
            params = dict(parse_qsl(urlsplit(path).query, keep_blank_values=True))
            path = urlsplit(path).path
        record = RecordedRequest(method=method, path=path, headers=headers, params=params)
        delay = 0.0
        with self._lock:
            self.requests.append(record)
            status, body, delay, replayed = self._answer(method, path, headers, params)
            record.status, record.body, record.replayed = status, body, replayed
        if delay:
            self._closing.wait(delay)
        extra = {"Request-Id": "req_" + secrets.token_hex(7)}
        if headers.get("idempotency-key"):
            extra["Idempotency-Key"] = headers["idempotency-key"]
        if replayed:
            extra["Idempotent-Replayed"] = "true"
        return status, body, extra

    def _answer(
        self, method: str, path: str, headers: dict[str, str], params: dict[str, str]
    ) -> tuple[int, dict, float, bool]:
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return (*_error(401, "invalid_request_error", "Invalid API Key provided."), 0.0, False)
        if path == "/v1/refunds" and method == "POST":
            return self._create_refund(headers.get("idempotency-key"), params)
        if path == "/v1/refunds" and method == "GET" and self.lookup_failure:
            return (*_server_error(self.lookup_failure), 0.0, False)
        if path == "/v1/refunds" and method == "GET":
            return (*self._list_refunds(params), 0.0, False)
        if path == "/v1/charges" and method == "GET":
            return (*self._list_charges(params), 0.0, False)
        if path.startswith("/v1/refunds/") and method == "GET":
            refund_id = path.removeprefix("/v1/refunds/")
            for refund in self.refunds:
                if refund["id"] == refund_id:
                    return 200, refund, 0.0, False
            return (
                *_error(404, "invalid_request_error", f"No such refund: '{refund_id}'", "resource_missing", "id"),
                0.0,
                False,
            )
        return (*_error(404, "invalid_request_error", f"Unrecognized request URL ({method}: {path})."), 0.0, False)

    def _list_charges(self, params: dict[str, str]) -> tuple[int, dict]:
        if self.charge_read_refusal:
            return _error(self.charge_read_refusal, "invalid_request_error", "Invalid API Key provided.")
        if self.charge_read_failures is None or self.charge_read_failures > 0:
            if self.charge_read_failures is not None:
                self.charge_read_failures -= 1
            return _server_error(self.charge_read_status)
        intents = [
            intent for intent in self.payment_intents.values() if params.get("payment_intent") in (None, intent.id)
        ]
        found = [charge for intent in intents for charge in intent.charges()]
        return self._page(found, params, "/v1/charges", "charge")

    def _list_refunds(self, params: dict[str, str]) -> tuple[int, dict]:
        """Newest first, `limit` (1-100, default 10) per page from after `starting_after`."""
        found = [r for r in self.refunds if params.get("payment_intent") in (None, r["payment_intent"])][::-1]
        return self._page(found, params, "/v1/refunds", "refund")

    def _page(self, found: list[dict[str, Any]], params: dict[str, str], url: str, name: str) -> tuple[int, dict]:
        limit = int(params.get("limit") or 10)
        if not 1 <= limit <= 100:
            return _error(400, "invalid_request_error", "Invalid integer: limit", "parameter_invalid_integer", "limit")
        if self.page_size:
            limit = min(limit, self.page_size)
        after = params.get("starting_after")
        if after:
            ids = [r["id"] for r in found]
            if after not in ids:
                return _error(
                    404, "invalid_request_error", f"No such {name}: '{after}'", "resource_missing", "starting_after"
                )
            found = found[ids.index(after) + 1 :]
        return 200, {"object": "list", "url": url, "has_more": len(found) > limit, "data": found[:limit]}

    def _create_refund(self, key: str | None, params: dict[str, str]) -> tuple[int, dict, float, bool]:
        fault = self._faults[0] if self._faults else None
        if fault is not None and fault.before_endpoint:
            self._faults.popleft()
            if fault.kind == "conflict":
                return (
                    *_error(
                        409,
                        "idempotency_error",
                        "There is currently another in-progress request using this Stripe token "
                        "(that probably means you clicked twice). Try again later.",
                        "idempotency_key_in_use",
                    ),
                    0.0,
                    False,
                )
            return (*_server_error(fault.status), 0.0, False)

        fingerprint = ("POST", "/v1/refunds", tuple(sorted(params.items())))
        if key is not None and key in self._saved:
            saved = self._saved[key]
            if saved.fingerprint != fingerprint:
                return (
                    *_error(
                        400,
                        "idempotency_error",
                        f"Keys for idempotent requests can only be used with the same parameters they "
                        f"were first used with. Try using a key other than '{key}' if you meant to "
                        f"execute a different request.",
                    ),
                    0.0,
                    False,
                )
            return saved.status, saved.body, 0.0, True

        invalid = _validation_error(params)
        if invalid is not None:
            return (*invalid, 0.0, False)  # like Stripe: a request that fails validation is not saved

        if fault is not None:
            self._faults.popleft()
        delay = fault.seconds if fault is not None and fault.kind == "timeout" else 0.0
        if fault is not None and fault.kind == "saved_error":
            status, body = _server_error(fault.status)
        else:
            refusal = fault if fault is not None and fault.kind == "refuse" else None
            status, body = self._refund_endpoint(params, refusal)
        if key is not None:
            self._saved[key] = Saved(fingerprint=fingerprint, status=status, body=body)
        return status, body, delay, False

    def _refund_endpoint(self, params: dict[str, str], refusal: Fault | None) -> tuple[int, dict]:
        intent = self._intent_for(params)
        if intent is None:
            name = "payment_intent" if "payment_intent" in params else "charge"
            return _error(404, "invalid_request_error", f"No such {name}: '{params[name]}'", "resource_missing", name)
        if refusal is not None:
            message = refusal.message or DEFAULT_MESSAGES.get(refusal.code, "").format(charge=intent.charge)
            return _error(refusal.status, refusal.type, message or refusal.code, refusal.code, refusal.param)
        if intent.unrefunded <= 0:
            return _error(
                400,
                "invalid_request_error",
                DEFAULT_MESSAGES["charge_already_refunded"].format(charge=intent.charge),
                "charge_already_refunded",
            )
        amount = int(params["amount"]) if "amount" in params else intent.unrefunded
        if amount > intent.unrefunded:
            # Stripe sends no `code` here, only the param.
            return _error(
                400,
                "invalid_request_error",
                f"Refund amount (${amount / 100:.2f}) is greater than unrefunded amount on charge "
                f"(${intent.unrefunded / 100:.2f})",
                param="amount",
            )
        metadata = {k[len("metadata[") : -1]: v for k, v in params.items() if k.startswith("metadata[")}
        refund = self._refund_object(
            intent, amount, metadata=metadata, reason=params.get("reason"), status=self.refund_status
        )
        if self.refund_status not in ("failed", "canceled"):
            intent.refunded += amount
        self.refunds.append(refund)
        self._event("refund.created", refund)
        return 200, refund

    @staticmethod
    def _refund_object(
        intent: PaymentIntent, amount: int, *, metadata: dict[str, str], reason: str | None, status: str
    ) -> dict[str, Any]:
        return {
            "id": "re_" + secrets.token_hex(12),
            "object": "refund",
            "amount": amount,
            "balance_transaction": "txn_" + secrets.token_hex(12),
            "charge": intent.charge,
            "created": int(time.time()),
            "currency": intent.currency,
            "failure_reason": "lost_or_stolen_card" if status == "failed" else None,
            "metadata": metadata,
            "payment_intent": intent.id,
            "pending_reason": "processing" if status == "pending" else None,
            "reason": reason,
            "status": status,
        }

    def _intent_for(self, params: dict[str, str]) -> PaymentIntent | None:
        if "payment_intent" in params:
            return self.payment_intents.get(params["payment_intent"])
        return next((pi for pi in self.payment_intents.values() if pi.charge == params.get("charge")), None)


def _error(status: int, type: str, message: str, code: str = "", param: str = "") -> tuple[int, dict]:
    error: dict[str, Any] = {"type": type, "message": message}
    if code:
        error["code"] = code
        error["doc_url"] = f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}"
    if param:
        error["param"] = param
    return status, {"error": error}


def _server_error(status: int) -> tuple[int, dict]:
    if status == 429:
        return _error(429, "invalid_request_error", "Too many requests hit the API too quickly.", "rate_limit")
    return _error(status, "api_error", "An unknown error occurred while processing your request.")


def _validation_error(params: dict[str, str]) -> tuple[int, dict] | None:
    for name in params:
        if name not in REFUND_PARAMS and not name.startswith(REFUND_PARAM_PREFIXES):
            return _error(
                400, "invalid_request_error", f"Received unknown parameter: {name}", "parameter_unknown", name
            )
    if "payment_intent" not in params and "charge" not in params:
        return _error(
            400,
            "invalid_request_error",
            "One of the following params should be provided for this request: payment_intent or charge.",
            "parameter_missing",
        )
    if "amount" in params and (not params["amount"].isdigit() or int(params["amount"]) < 1):
        return _error(
            400,
            "invalid_request_error",
            "This value must be greater than or equal to 1.",
            "parameter_invalid_integer",
            "amount",
        )
    return None


def _handler_for(fake: FakeStripe) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "fake-stripe/1"

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw_body = self.rfile.read(length) if length else b""
            headers = {name.lower(): value for name, value in self.headers.items()}
            status, body, extra = fake.handle(method, self.path, headers, raw_body)
            payload = json.dumps(body).encode()
            try:
                self.send_response(status, HTTPStatus(status).phrase)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a time-out fault): its answer is lost, as intended

        def do_POST(self) -> None:  # noqa: N802
            self._serve("POST")

        def do_GET(self) -> None:  # noqa: N802
            self._serve("GET")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main() -> None:  # pragma: no cover - a tool for running the fake by hand
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=12111)
    parser.add_argument("--api-key", default="sk_test_x")
    parser.add_argument("--payment-intent", action="append", default=[], metavar="ID:AMOUNT:CURRENCY")
    args = parser.parse_args()
    fake = FakeStripe(api_key=args.api_key, port=args.port)
    for spec in args.payment_intent:
        intent_id, amount, currency = spec.split(":")
        fake.add_payment_intent(intent_id, amount=int(amount), currency=currency)
    print(f"fake Stripe on {fake.url} (STRIPE_API_BASE), key {args.api_key}", flush=True)
    fake.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
