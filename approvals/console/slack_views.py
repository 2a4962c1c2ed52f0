"""Slack's side of the review: `POST /integrations/slack/interactions` (the buttons and the reject
modal) and the console page where a staff member links their Slack user.

Every interaction must carry Slack's v0 signature over its body and timestamp (slack_sdk's
SignatureVerifier: HMAC-SHA256 with SLACK_SIGNING_SECRET, compared in constant time), a timestamp
within five minutes, and a signature not seen before; anything else is refused with a 401, counted
(`gateway_slack_requests_refused{reason}`) and logged. Of the payload only Slack's word on who clicked
is used; which preview, digest and version the button carries are checked by the decision service.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST
from prometheus_client import Counter
from slack_sdk.signature import SignatureVerifier

from approvals.console import slack
from approvals.console.views import reviewer_required
from approvals.core.services import Decision
from approvals.core.types import AuthenticatedHttpRequest
from approvals.models import SlackUserLink

logger = logging.getLogger(__name__)

SIGNATURE_WINDOW_SECONDS = 5 * 60
NOTE_LIMIT = 1000

requests_refused = Counter(
    "gateway_slack_requests_refused",
    "Slack interaction requests refused before reading them, by reason (unsigned, late, bad_signature, replay).",
    ["reason"],
)


def _refusal(request: HttpRequest) -> str | None:
    """Why this request is not one Slack signed just now, or None."""
    timestamp = request.headers.get("X-Slack-Request-Timestamp")
    signature = request.headers.get("X-Slack-Signature")
    if not timestamp or not signature:
        return "unsigned"
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > SIGNATURE_WINDOW_SECONDS:
        return "late"
    verifier = SignatureVerifier(settings.SLACK_SIGNING_SECRET)
    if not verifier.is_valid(body=request.body, timestamp=timestamp, signature=signature):
        return "bad_signature"
    if slack.request_seen(signature):
        return "replay"
    return None


# Slack cannot send Django's CSRF token. The endpoint is exempt only because every request must carry
# Slack's signature over its exact body (checked first, below), which no other site can forge.
@csrf_exempt
@require_POST
def slack_interactions(request: HttpRequest) -> HttpResponse:
    if not slack.slack_configured():
        raise Http404("Slack is not configured.")
    refusal = _refusal(request)
    if refusal is not None:
        requests_refused.labels(refusal).inc()
        logger.warning(
            "Slack interaction refused: %s",
            refusal,
            extra={"event": "slack_request_refused", "reason": refusal, "remote": request.META.get("REMOTE_ADDR")},
        )
        return HttpResponse("The request is not signed by Slack, or not any more.", status=401)
    try:
        payload = json.loads(request.POST.get("payload", ""))
    except ValueError:
        return HttpResponseBadRequest("No payload.")
    if not isinstance(payload, dict):
        return HttpResponseBadRequest("No payload.")
    if payload.get("type") == "block_actions":
        return _button(payload)
    if payload.get("type") == "view_submission":
        return _reject_submitted(payload)
    return HttpResponse(status=200)


def _slack_user(payload: dict[str, Any]) -> str:
    user = payload.get("user")
    return str(user.get("id", "")) if isinstance(user, dict) else ""


def _button(payload: dict[str, Any]) -> HttpResponse:
    actions = payload.get("actions")
    action = actions[0] if isinstance(actions, list) and actions and isinstance(actions[0], dict) else {}
    action_id = action.get("action_id")
    if action_id not in (slack.APPROVE, slack.REJECT):
        return HttpResponse(status=200)  # a link button (the console, linking an account): Slack opens it
    value = slack.ButtonValue.parse(str(action.get("value", "")))
    slack_user_id = _slack_user(payload)
    if value is None or not slack_user_id:
        return HttpResponseBadRequest("Not a review button.")
    channel = slack.review_channel(value.preview_id)
    person = slack.staff_for_slack_user(slack_user_id)
    if person is None:
        slack.tell(slack_user_id, channel, slack.UNMAPPED, link=True)
        return HttpResponse(status=200)
    if action_id == slack.APPROVE:
        refusal = slack.slack_decide(person=person, slack_user_id=slack_user_id, value=value, decision=Decision.APPROVE)
        if refusal:
            slack.tell(slack_user_id, channel, refusal)
        return HttpResponse(status=200)
    refusal = slack.reject_refusal(person, value)
    if refusal:
        slack.tell(slack_user_id, channel, refusal)
        return HttpResponse(status=200)
    try:
        slack.slack_call(
            "views_open",
            trigger_id=str(payload.get("trigger_id", "")),
            view=slack.reject_modal(f"{value.preview_id}:{value.digest}:{value.subject_version}"),
        )
    except slack.SLACK_FAILURES:
        logger.warning("Could not open the reject modal", exc_info=True)
        slack.tell(slack_user_id, channel, "Nothing was decided: Slack could not open the form. Try again.")
    return HttpResponse(status=200)


def _note(payload: dict[str, Any]) -> str:
    view = payload.get("view") if isinstance(payload.get("view"), dict) else {}
    values = ((view or {}).get("state") or {}).get("values") or {}
    entered = (values.get(slack.NOTE_BLOCK) or {}).get(slack.NOTE_INPUT) or {}
    return str(entered.get("value") or "").strip()


def _reject_submitted(payload: dict[str, Any]) -> HttpResponse:
    view = payload.get("view")
    if not isinstance(view, dict) or view.get("callback_id") != slack.REJECT_CALLBACK:
        return HttpResponse(status=200)
    value = slack.ButtonValue.parse(str(view.get("private_metadata", "")))
    slack_user_id = _slack_user(payload)
    if value is None or not slack_user_id:
        return HttpResponseBadRequest("Not a review form.")
    note = _note(payload)
    if not note or len(note) > NOTE_LIMIT:
        words = "Say why (the customer and the agent see it)." if not note else "At most 1000 characters."
        return JsonResponse({"response_action": "errors", "errors": {slack.NOTE_BLOCK: words}})
    channel = slack.review_channel(value.preview_id)
    person = slack.staff_for_slack_user(slack_user_id)
    if person is None:
        slack.tell(slack_user_id, channel, slack.UNMAPPED, link=True)
        return HttpResponse(status=200)
    refusal = slack.slack_decide(
        person=person, slack_user_id=slack_user_id, value=value, decision=Decision.DECLINE, note=note
    )
    if refusal:
        slack.tell(slack_user_id, channel, refusal)
    return HttpResponse(status=200)


# Linking a Slack user to a staff account ---------------------------------------------------------


@reviewer_required
@require_http_methods(["GET", "POST"])
def slack_link(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The staff member's own Slack link. A link is made only from a token the gateway sent to that
    Slack user alone (the ephemeral answer to an unknown clicker), so nobody links someone else's."""
    token = request.POST.get("token") or request.GET.get("token") or ""
    slack_user_id = slack.link_token_user(token) if token else None
    current = SlackUserLink.objects.filter(user=request.user).first()
    if request.method == "POST":
        if request.POST.get("operation") == "unlink":
            if current is not None:
                current.delete()
                logger.info("Slack user %s unlinked from %s", current.slack_user_id, request.user.get_username())
            messages.success(request, "Your Slack user is no longer linked.")
            return redirect("console:slack_link")
        if slack_user_id is None:
            messages.error(request, "That link is out of date. Click the button in Slack again for a new one.")
            return redirect("console:slack_link")
        SlackUserLink.objects.filter(slack_user_id=slack_user_id).exclude(user=request.user).delete()
        SlackUserLink.objects.update_or_create(user=request.user, defaults={"slack_user_id": slack_user_id})
        logger.info("Slack user %s linked to %s", slack_user_id, request.user.get_username())
        messages.success(request, f"Slack user {slack_user_id} is now you: its decisions in Slack are yours.")
        return redirect("console:slack_link")
    context = {
        "current": current,
        "token": token if slack_user_id else "",
        "slack_user_id": slack_user_id,
        "token_stale": bool(token) and slack_user_id is None,
        "nav": "slack",
    }
    return render(request, "console/slack_link.html", context)
