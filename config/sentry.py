"""Optional error reporting to Sentry (sentry-sdk, with its Django and Celery integrations).

Called from settings only when SENTRY_DSN is set; without it nothing here runs and sentry-sdk stays
inactive. Events carry no personal data (`send_default_pii=False`: no cookies, no user, no request
body) and pass through the logs' scrubbing (approvals.operations.logs.scrub_value) before they leave.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import sentry_sdk
from sentry_sdk.integrations.celery import CeleryIntegration
from sentry_sdk.integrations.django import DjangoIntegration

# An event, a transaction or a breadcrumb: sentry-sdk's hooks each get and return their own kind.
Payload = TypeVar("Payload", bound=Mapping[str, Any])


def scrub_event(event: Payload, hint: dict[str, Any] | None = None) -> Payload:
    """before_send and before_breadcrumb: tokens, passwords, card and bank numbers masked throughout."""
    from approvals.operations.logs import scrub_value

    return scrub_value(event)


def sentry_init(*, dsn: str, environment: str = "production", traces_sample_rate: float = 0.0, **options: Any) -> None:
    sentry_sdk.init(
        dsn=dsn,
        environment=environment,
        integrations=[DjangoIntegration(), CeleryIntegration()],
        send_default_pii=False,
        max_request_body_size="never",
        before_send=scrub_event,
        before_send_transaction=scrub_event,
        before_breadcrumb=scrub_event,
        traces_sample_rate=traces_sample_rate,
        **options,
    )
