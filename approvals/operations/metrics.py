"""The gateway's Prometheus metrics (prometheus_client), and the one-line functions the services call.

Every function here counts an event of the approval pipeline and writes one log line about it
(logger `approvals.pipeline`), with the preview's ids bound to the log context (approvals.operations.logs).
The services call them right after the event's audit record, inside their transaction: a transaction
that fails after that point (its COMMIT) is counted all the same, which the audit log and the
previews gauge put right. (Deferring each to `transaction.on_commit` would cost a callback per event
and change what runs at commit.)

Exposition (`exposition`) is for the /metrics endpoint (approvals.operations.probes) and the Celery worker's
exporter (`start_exporter`). With PROMETHEUS_MULTIPROC_DIR set (gunicorn's workers, Celery's pool),
every process writes its values to files there and the scrape adds them up; see docs/operations.md.
The gauges of previews per state are not stored anywhere: PipelineCollector computes them at scrape
time with one GROUP BY query.

Label values are bounded sets: action names the start-up names (`count_actions`, from the registry),
statuses, outcomes, refusal and
failure codes, HTTP methods (others are `other`) and URL pattern names (never raw paths).
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
from collections.abc import Callable, Collection, Iterator
from datetime import datetime
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer

from approvals.models import Preview, PreviewStatus
from approvals.operations import logs

logger = logging.getLogger("approvals.pipeline")

# The action names label values may take; the engine's start-up names them (ApprovalsConfig.ready), so
# that operations, which the core and the audit log report to, imports neither.
_action_names: Callable[[], Collection[str]] = frozenset


def count_actions(names: Callable[[], Collection[str]]) -> None:
    """Where the registered action names come from (called once at start-up)."""
    global _action_names
    _action_names = names


# How far the audit log's sealer is behind (approvals.audit.seal.seal_lag_seconds), named likewise.
_seal_lag_seconds: Callable[[], float] | None = None


def measure_seal_lag(lag: Callable[[], float]) -> None:
    global _seal_lag_seconds
    _seal_lag_seconds = lag


# The witnesses' report (approvals.audit.cosigning.witnesses_report), for AuditWitnessCollector and /readyz.
_witnesses_report: Callable[[], dict[str, Any] | None] | None = None


def measure_witnesses(report: Callable[[], dict[str, Any] | None]) -> None:
    global _witnesses_report
    _witnesses_report = report


def witnesses_report() -> dict[str, Any] | None:
    """The audit witnesses' state now (None: no witnesses configured, or nobody named the report)."""
    return _witnesses_report() if _witnesses_report is not None else None


# Statuses a preview never leaves. Every other status (the waiting ones, `approved`, and any added
# later, such as `needs_attention`) is counted by the previews gauge.
SETTLED_STATUSES = frozenset({"executed", "declined", "rejected", "expired", "superseded", "failed", "withdrawn"})

# Web ----------------------------------------------------------------------------------------------

HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

http_requests = Counter(
    "gateway_http_requests",
    "HTTP requests answered, by view (URL pattern name), method and status code.",
    ["view", "method", "status"],
)
http_request_duration = Histogram(
    "gateway_http_request_duration_seconds",
    "Time to answer an HTTP request, by view and method.",
    ["view", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)


# The labelled children per (view, method, status), so that a request costs two updates and no label
# lookups (prometheus_client's `labels()` validates and locks each time). Bounded: views are URL
# pattern names, methods a fixed set, statuses three digits.
_http_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}


def http_request(view: str, method: str, status: int, seconds: float) -> None:
    """Called by approvals.operations.middleware.OperationsMiddleware for every request."""
    method = method if method in HTTP_METHODS else "other"
    children = _http_children.get((view, method, status))
    if children is None:
        children = _http_children.setdefault(
            (view, method, status),
            (http_requests.labels(view, method, str(status)), http_request_duration.labels(view, method)),
        )
    children[0].inc()
    children[1].observe(seconds)


# Proposals and decisions ------------------------------------------------------------------------

proposals = Counter(
    "gateway_proposals",
    "Tool calls by action and outcome: created, repeated (the same pending proposal), replayed (the same "
    "Idempotency-Key), refused (policy; `code` is the refusal code), invalid or forbidden (never reached "
    "the policy; `code` is the error code).",
    ["action", "outcome", "code"],
)
decisions = Counter(
    "gateway_decisions",
    "People's decisions on previews: confirmed, approved, declined, rejected, refused (`code` says why).",
    ["action", "role", "decision", "code"],
)


def _log(message: str, level: int = logging.INFO, **fields: Any) -> None:
    logger.log(level, message, extra={"event": message.replace(" ", "_"), **fields})


def _proposal(action: str, outcome: str, code: str = "", **fields: Any) -> None:
    proposals.labels(action, outcome, code).inc()
    _log(f"proposal {outcome}", code=code or None, **fields)


def proposal_created(preview: Preview) -> None:
    logs.bind_preview(preview)
    _proposal(preview.action, "created", status=preview.status)


def proposal_repeated(preview: Preview) -> None:
    logs.bind_preview(preview)
    _proposal(preview.action, "repeated", status=preview.status)


def proposal_replayed(action: str, http_status: int) -> None:
    logs.bind(action=action)
    _proposal(action, "replayed", http_status=http_status)


def proposal_refused(action: str, code: str) -> None:
    logs.bind(action=action)
    _proposal(action, "refused", code)


def proposal_rejected(action: str, *, event: str, code: str) -> None:
    """A tool call refused before the policy (audit event proposal_invalid or proposal_forbidden).
    `action` is the tool name asked for, kept only when it is a registered action (bounded labels)."""
    action = action if action in _action_names() else "unknown"
    _proposal(action, "forbidden" if event == "proposal_forbidden" else "invalid", code)


def decision(preview: Preview, *, role: str, decision: str, code: str = "") -> None:
    """`decision`: confirmed, approved, declined, rejected or refused (with the DecisionError's code)."""
    logs.bind_preview(preview)
    decisions.labels(preview.action, str(role), str(decision), code).inc()
    _log(f"preview {decision}", role=str(role), code=code or None, status=preview.status)


# Execution --------------------------------------------------------------------------------------

executions = Counter(
    "gateway_executions",
    "Executions that reached an outcome, by action, outcome (succeeded, refused_before_effect, "
    "failed_after_check, effect_unknown, …) and error_class (the refusal or provider error code; "
    "empty on success).",
    ["action", "outcome", "error_class"],
)
execution_attempt_failures = Counter(
    "gateway_execution_attempt_failures",
    "Execution attempts that failed transiently (provider timeout, 5xx, mail server down), by action, "
    "provider error class and whether another attempt follows.",
    ["action", "error_class", "will_retry"],
)
execution_retries = Counter(
    "gateway_execution_retries",
    "Executions run again: `automatic` (the worker's backoff) or `staff` (a retry from the console).",
    ["action", "trigger"],
)
confirm_to_executed = Histogram(
    "gateway_confirm_to_executed_seconds",
    "From the approval that completed a preview (the customer's confirmation, or staff's approval when "
    "staff decide last) to its execution being recorded.",
    ["action"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0),
)


def execution_outcome(
    preview: Preview, outcome: str, *, error_class: str = "", approved_at: datetime | None = None
) -> None:
    """An execution reached `outcome` (a string of the execution outcome set). With `approved_at`
    (when the preview became approved), the confirm → executed latency is observed too."""
    logs.bind_preview(preview)
    executions.labels(preview.action, outcome, error_class).inc()
    seconds = None
    if approved_at is not None:
        seconds = max((timezone.now() - approved_at).total_seconds(), 0.0)
        confirm_to_executed.labels(preview.action).observe(seconds)
    _log(
        f"execution {outcome}",
        logging.INFO if outcome == "succeeded" else logging.WARNING,
        outcome=outcome,
        error_class=error_class or None,
        confirm_to_executed_seconds=seconds,
    )


def execution_succeeded(preview: Preview, approvals: Any) -> None:
    """Executed; `approvals` are the preview's approvals (the last one completed it)."""
    execution_outcome(preview, "succeeded", approved_at=max((a.created_at for a in approvals), default=None))


def execution_failed(preview: Preview, *, code: str) -> None:
    """An approved preview failed for good: after its retries ran out (`retries_exhausted`: whether the
    provider acted is unknown), or refused by the provider or the executor after the checks."""
    execution_outcome(
        preview, "effect_unknown" if code == "retries_exhausted" else "failed_after_check", error_class=code
    )


def execution_attempt_failed(preview: Preview, *, error_class: str, will_retry: bool) -> None:
    """One attempt failed transiently; with `will_retry` the worker tries again (counted as a retry)."""
    logs.bind_preview(preview)
    execution_attempt_failures.labels(preview.action, error_class, "true" if will_retry else "false").inc()
    if will_retry:
        execution_retries.labels(preview.action, "automatic").inc()
    _log("execution attempt failed", logging.WARNING, error_class=error_class, will_retry=will_retry)


def execution_retried(preview: Preview, *, trigger: str) -> None:
    """A person ran a failed execution again (`trigger="staff"`)."""
    logs.bind_preview(preview)
    execution_retries.labels(preview.action, trigger).inc()
    _log("execution retried", trigger=trigger)


# Webhooks ---------------------------------------------------------------------------------------

webhook_deliveries = Counter(
    "gateway_webhook_deliveries",
    "Webhook messages handed over (a 2xx answer), by kind (agent_session, review_notify, audit_checkpoint, …).",
    ["kind"],
)
webhook_failures = Counter(
    "gateway_webhook_failures",
    "Webhook delivery attempts that failed, by kind and reason (timeout, connection, http_4xx, http_5xx, …) "
    "and whether another attempt follows.",
    ["kind", "reason", "will_retry"],
)
webhook_delivery_duration = Histogram(
    "gateway_webhook_delivery_seconds",
    "Time of one webhook delivery attempt, by kind.",
    ["kind"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)


def webhook_delivered(kind: str, *, seconds: float) -> None:
    """For the webhook senders: one message accepted by its receiver after `seconds`."""
    webhook_deliveries.labels(kind).inc()
    webhook_delivery_duration.labels(kind).observe(seconds)


def webhook_failed(kind: str, *, reason: str, seconds: float, will_retry: bool) -> None:
    """For the webhook senders: one attempt failed; `reason` from a small fixed set (see the help)."""
    webhook_failures.labels(kind, reason, "true" if will_retry else "false").inc()
    webhook_delivery_duration.labels(kind).observe(seconds)


# Audit witnesses --------------------------------------------------------------------------------

audit_witness_cosignatures = Counter(
    "gateway_audit_witness_cosignatures",
    "Checkpoints a witness cosigned (the cosignature verified and kept), by witness name.",
    ["witness"],
)
audit_witness_refusals = Counter(
    "gateway_audit_witness_refusals",
    "Checkpoints a witness refused, by witness name, HTTP status (400, 403, 404, 409, 422, or 200 for an "
    "answer without a valid cosignature) and outcome (refused; conflict or ahead: a 409 naming a size this "
    "log can't follow; bad_answer). Not sent to that witness again; the next head is.",
    ["witness", "status", "outcome"],
)
audit_witness_unanswered = Counter(
    "gateway_audit_witness_unanswered",
    "Submissions to a witness with no usable answer, asked again later, by witness name and status (429, "
    "5xx, or timeout, connection, deadline).",
    ["witness", "status"],
)


def audit_witness_answered(witness: str, *, outcome: str, status: str) -> None:
    """For approvals.audit.cosigning: what witness `witness` (its name, from AUDIT_WITNESSES) made of a
    checkpoint. `outcome` is one of approvals.audit.witnesses.Outcome's values."""
    if outcome == "cosigned":
        audit_witness_cosignatures.labels(witness).inc()
    elif outcome == "unreachable":
        audit_witness_unanswered.labels(witness, status).inc()
    elif outcome != "superseded":
        audit_witness_refusals.labels(witness, status, outcome).inc()


# Computed at scrape time ------------------------------------------------------------------------


def _counted_statuses() -> list[str]:
    return [status.value for status in PreviewStatus if status.value not in SETTLED_STATUSES]


class PipelineCollector:
    """Previews per action and state, and how long the longest-waiting one has been in its state, from
    one GROUP BY over the previews not settled (an index range on (status, created_at), so bounded by
    the work in progress, not by history). Settled previews are counted by the counters above as they
    settle; a count of all of history would grow with every refund ever made."""

    def collect(self) -> Iterator[Any]:
        statuses = _counted_statuses()
        up = GaugeMetricFamily("gateway_pipeline_metrics_up", "1 when the previews could be counted at this scrape.")
        count = GaugeMetricFamily(
            "gateway_previews",
            "Previews now in each state that is not settled, by action.",
            labels=["action", "status"],
        )
        oldest = GaugeMetricFamily(
            "gateway_preview_oldest_age_seconds",
            "How long the preview longest in each state has been in it (since its status last changed, as the "
            "sweeper counts); 0 when the state is empty.",
            labels=["action", "status"],
        )
        try:
            rows = list(
                Preview.objects.filter(status__in=statuses)
                .values_list("action", "status")
                .annotate(n=Count("pk"), first=Min("status_changed_at"))
                .order_by()
            )
        except DatabaseError:
            logger.warning("Could not count previews for /metrics", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        now = timezone.now()
        found = {(action, status): (n, first) for action, status, n, first in rows}
        actions = sorted({*_action_names(), *(action for action, _ in found)})
        for action in actions:
            for status in statuses:
                n, first = found.get((action, status), (0, None))
                count.add_metric([action, status], n)
                oldest.add_metric([action, status], (now - first).total_seconds() if first else 0.0)
        up.add_metric([], 1)
        yield from (up, count, oldest)


class AuditSealCollector:
    """How long the oldest audit record not yet sealed into the signed Merkle tree has waited (0 when all
    are): a sealer that is down or held back by a long transaction shows here (docs/audit.md)."""

    def collect(self) -> Iterator[Any]:
        if _seal_lag_seconds is None:
            return
        lag = GaugeMetricFamily(
            "gateway_audit_seal_lag_seconds",
            "Age of the oldest audit record not yet sealed under a signed tree head; 0 when every record is.",
        )
        try:
            lag.add_metric([], _seal_lag_seconds())
        except DatabaseError:
            logger.warning("Could not read the audit seal lag for /metrics", exc_info=True)
            return
        yield lag


class AuditWitnessCollector:
    """The witnesses as the database has them (approvals.audit.cosigning.witnesses_report): how far the
    published checkpoint is behind the latest tree head, and per witness what it cosigned and whether its
    last answer was a refusal (docs/audit.md). Nothing without AUDIT_WITNESSES."""

    def collect(self) -> Iterator[Any]:
        try:
            report = witnesses_report()
        except DatabaseError:
            logger.warning("Could not read the audit witnesses for /metrics", exc_info=True)
            return
        if report is None:
            return
        unwitnessed = GaugeMetricFamily(
            "gateway_audit_unwitnessed_leaves",
            "Leaves under the latest tree head but not under the latest published one (cosigned by the quorum).",
        )
        unwitnessed.add_metric([], report["latest_size"] - report["published_size"])
        waiting = GaugeMetricFamily(
            "gateway_audit_unpublished_seconds",
            "How long the oldest tree head not published has waited for its witnesses' quorum; 0 when none waits.",
        )
        waiting.add_metric([], report["unpublished_seconds"])
        cosigned = GaugeMetricFamily(
            "gateway_audit_witness_cosigned_size",
            "The largest tree head each witness cosigned.",
            labels=["witness"],
        )
        refusing = GaugeMetricFamily(
            "gateway_audit_witness_refusing",
            "1 when the witness's last answer was a refusal (refused, conflict, ahead, bad_answer), else 0.",
            labels=["witness"],
        )
        refused = set(report.get("refusing", ()))
        for name, entry in report["witnesses"].items():
            cosigned.add_metric([name], entry["cosigned_size"])
            refusing.add_metric([name], 1 if name in refused else 0)
        yield from (unwitnessed, waiting, cosigned, refusing)


class _Scrape:
    def __init__(self, *collectors: Any) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Any]:
        for collector in self.collectors:
            yield from collector.collect()


def _process_metrics() -> Any:
    """This process's metrics, or with PROMETHEUS_MULTIPROC_DIR every process's, added up."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry_ = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry_)
        return registry_
    return REGISTRY


def exposition(*, pipeline: bool = True) -> bytes:
    """The Prometheus text format. `pipeline`: with the gauges computed from the database (the web
    serves them; a worker's exporter leaves them out, so that they are not reported twice)."""
    collectors = (
        (_process_metrics(), PipelineCollector(), AuditSealCollector(), AuditWitnessCollector())
        if pipeline
        else (_process_metrics(),)
    )
    return generate_latest(_Scrape(*collectors))


CONTENT_TYPE = CONTENT_TYPE_LATEST


def authorized(header: str | None, token: str) -> bool | None:
    """None without an `Authorization: Bearer …` header, else whether it carries `token` (compared in
    constant time)."""
    scheme, _, presented = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        return None
    return hmac.compare_digest(presented.strip().encode(), token.encode())


# The Celery worker's exporter --------------------------------------------------------------------


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def exporter_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """/metrics of a worker machine, behind the same METRICS_TOKEN as the web's."""
    allowed = authorized(environ.get("HTTP_AUTHORIZATION"), settings.METRICS_TOKEN)
    if environ.get("PATH_INFO") != "/metrics":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"Not found\n"]
    if not allowed:
        start_response(
            "401 Unauthorized" if allowed is None else "403 Forbidden",
            [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
        )
        return [b"Send Authorization: Bearer <METRICS_TOKEN>\n"]
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
    return [exposition(pipeline=False)]


def start_exporter(address: str, port: int) -> ThreadingWSGIServer:
    """Serve `exporter_app` from a daemon thread (Celery's main process calls this at worker_init)."""
    server = make_server(address, port, exporter_app, ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-exporter", daemon=True).start()
    return server
