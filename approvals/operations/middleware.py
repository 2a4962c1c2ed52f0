"""The first middleware: request id, request metrics, and the operations endpoints."""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

from csp.middleware import CSPMiddleware
from django.http import HttpRequest, HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware

from approvals.operations import logs, metrics
from approvals.operations.probes import ENDPOINTS

REQUEST_ID_HEADER = "X-Request-ID"


class OperationsMiddleware:
    """First in MIDDLEWARE, so that it sees every request and every response.

    - Takes X-Request-ID (when it is 1 to 128 characters of `A-Za-z0-9._:=+/@-`) or makes one, binds it
      to the log context for the request, and echoes it on the response (also on every error).
    - Answers /healthz, /readyz and /metrics itself, before SecurityMiddleware (HTTPS redirect) and
      CommonMiddleware (ALLOWED_HOSTS) run: probes come by IP address. Their answers carry the same
      security headers as every other response.
    - Counts the request and its latency per view (the URL pattern's name): two metric updates.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        # The endpoints answered here skip the middleware below, so they get the headers of those that
        # set headers on the way out (CSP, frame options; nosniff, referrer policy, COOP and HSTS) from
        # the same classes and settings: only their process_response, never the HTTPS redirect.
        self.header_middleware = (
            CSPMiddleware(get_response),
            XFrameOptionsMiddleware(get_response),
            SecurityMiddleware(get_response),
        )

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = perf_counter()
        request_id = logs.request_id_from(request.META.get("HTTP_X_REQUEST_ID"))
        request.request_id = request_id  # type: ignore[attr-defined]  # for code that holds the request
        token = logs.bind(request_id=request_id)
        try:
            endpoint = ENDPOINTS.get(request.path_info)
            if endpoint is not None:
                view, answer = endpoint
                response = answer(request)
                for middleware in self.header_middleware:
                    middleware.process_response(request, response)  # sets headers on it in place
            else:
                response = self.get_response(request)
                match = getattr(request, "resolver_match", None)
                view = (match.view_name or "unnamed") if match is not None else "unresolved"
            response[REQUEST_ID_HEADER] = request_id
            metrics.http_request(view, request.method or "", response.status_code, perf_counter() - started)
            return response
        finally:
            logs.reset(token)
