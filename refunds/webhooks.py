"""POST /payments/stripe/webhook: Stripe's refund events, verified with the official SDK.

Stripe signs each delivery (`Stripe-Signature: t=<unix time>,v1=<HMAC-SHA256 of "<t>.<body>" with the
endpoint's secret>`). `stripe.Webhook.construct_event` checks the signature and refuses a timestamp
older than STRIPE_WEBHOOK_TOLERANCE_SECONDS; a timestamp as far in the future is refused here. An event
delivered again (Stripe retries until it gets a 2xx, and a replayed request carries a valid signature)
is answered 200 and changes nothing: events are stored under their id with a unique constraint.

Answers: 200 taken (or a duplicate), 400 unsigned, badly signed, stale or malformed, 404 when no
secret is configured, 503 when the event is about a refund our own execution has not recorded yet
(Stripe delivers it again later).
"""

from __future__ import annotations

import json
import logging
import time

import stripe
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .events import STRIPE, RefundNotRecordedYet, provider_event_take

logger = logging.getLogger(__name__)


def _refused(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"ok": False, "error": {"code": code, "message": message}}, status=status)


def _timestamp(header: str) -> int | None:
    for item in header.split(","):
        name, _, value = item.strip().partition("=")
        if name == "t" and value.isdigit():
            return int(value)
    return None


@csrf_exempt  # authenticated by Stripe's signature, not by a browser session
@require_POST
def stripe_webhook(request: HttpRequest) -> JsonResponse:
    secret = settings.STRIPE_WEBHOOK_SECRET
    if not secret:
        return _refused(404, "webhook_not_configured", "STRIPE_WEBHOOK_SECRET is not set.")
    header = request.headers.get("Stripe-Signature", "")
    tolerance = settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS
    try:
        payload = request.body.decode("utf-8")
        event = stripe.Webhook.construct_event(payload, header, secret, tolerance=tolerance)
    except UnicodeDecodeError:
        return _refused(400, "payload_invalid", "The body is not UTF-8.")
    except ValueError:
        return _refused(400, "payload_invalid", "The body is not a Stripe event.")
    except stripe.SignatureVerificationError as error:
        logger.warning("Stripe webhook refused: %s", error.user_message or error)
        return _refused(400, "signature_invalid", str(error.user_message or "The signature does not verify."))
    stamp = _timestamp(header)
    if stamp is not None and stamp > time.time() + tolerance:
        return _refused(400, "signature_invalid", "The signature's timestamp is in the future.")
    data = json.loads(payload)  # verified: the event exactly as Stripe sent it
    event_id = getattr(event, "id", None)
    if not isinstance(data, dict) or not event_id or data.get("id") != event_id or not data.get("type"):
        return _refused(400, "payload_invalid", "The event has no id or type.")
    try:
        outcome = provider_event_take(provider=STRIPE, event=data)
    except RefundNotRecordedYet as early:
        return _refused(503, "not_recorded_yet", f"{early} Deliver it again later.")
    return JsonResponse({"ok": True, "event": data["id"], "result": outcome.result, "duplicate": outcome.duplicate})
