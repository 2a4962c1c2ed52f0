"""A person's passkeys pages, for staff (`/console/passkeys/`) and customers (`/account/passkeys/`): the list,
registering one (navigator.credentials.create, static/js/passkeys.js), removing one, a lead removing a
staff member's passkeys (a lost device); and the step-up options the decision pages ask for before
navigator.credentials.get.

Registering or removing needs the password again: it is checked (through the throttled login backend)
on the post that starts the registration or removes, and a registration must finish within
REAUTH_SECONDS of it, in the same session. Every JSON answer is `{"ok": true, …}` or
`{"ok": false, "error": {"code", "message", …}}`, with the decision codes `step_up_required` and
`step_up_invalid` where they apply.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from approvals.core.errors import DecisionError, ErrorCode
from approvals.core.passkey_challenge import DIGEST
from approvals.core.services import (
    PasskeyError,
    may_manage_passkeys,
    passkey_register,
    passkey_registration_options,
    passkey_remove,
    passkeys_remove_for_lost_device,
    step_up_options,
)
from approvals.core.services.passkeys import MAX_DIGESTS
from approvals.core.types import AuthenticatedHttpRequest

REAUTH_SECONDS = 300
PENDING_REGISTRATION = "passkey_registration"
MAX_CREDENTIAL_CHARS = 16 * 1024


@dataclass(frozen=True)
class Audience:
    """Staff (the console's pages) or a customer (their account's)."""

    namespace: str
    template: str
    staff: bool


STAFF = Audience("console_passkeys", "passkeys/console.html", staff=True)
CUSTOMER = Audience("account_passkeys", "passkeys/account.html", staff=False)

View = Callable[..., HttpResponseBase]


def _allowed(audience: Audience, user: Any) -> bool:
    return bool(user.is_active and (user.is_staff or not audience.staff))


def audience_view(audience: Audience) -> Callable[[View], View]:
    """Anonymous people go to the login page; on the console's pages, anyone but active staff gets a 403."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not _allowed(audience, request.user):
                return render(request, "console/forbidden.html", status=403)
            return view(request, audience, *args, **kwargs)

        return wrapper

    return decorator


def refusal(code: str, message: str, *, status: int, **facts: Any) -> JsonResponse:
    return JsonResponse({"ok": False, "error": {"code": code, "message": message, **facts}}, status=status)


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _back_link(request: HttpRequest) -> str:
    """Where the person came from (a decision page that needs a passkey), never outside this site."""
    target = request.GET.get("next") or request.POST.get("next") or ""
    if target.startswith("/") and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return ""


def _with_next(url: str, back: str) -> str:
    return f"{url}?{urllib.parse.urlencode({'next': back})}" if back else url


class RegisterForm(forms.Form):
    name = forms.CharField(label="Name of the passkey", max_length=64, strip=True)
    password = forms.CharField(label="Your password, again", strip=False, widget=forms.PasswordInput)


class PasswordForm(forms.Form):
    password = forms.CharField(label="Your password, again", strip=False, widget=forms.PasswordInput)


class StepUpOptionsForm(forms.Form):
    def clean(self) -> dict[str, Any]:
        digests = self.data.getlist("digest") if hasattr(self.data, "getlist") else []
        if not 1 <= len(digests) <= MAX_DIGESTS or not all(DIGEST.match(d) for d in digests):
            raise forms.ValidationError(f"Send 1 to {MAX_DIGESTS} preview digests (64 lowercase hex characters).")
        self.cleaned_data["digests"] = digests
        return self.cleaned_data


def _password_ok(request: AuthenticatedHttpRequest, password: str) -> bool | None:
    """Whether `password` is the signed-in person's (None: too many attempts, paused like the login)."""
    try:
        return authenticate(request, username=request.user.get_username(), password=password) == request.user
    except PermissionDenied:
        return None


PASSWORD_WORDS = {False: "That is not your password.", None: "Too many attempts. Wait a few minutes and try again."}


def _page(request: AuthenticatedHttpRequest, audience: Audience, *, status: int = 200, **extra: Any) -> HttpResponse:
    staff_with_passkeys: list[Any] = []
    if audience.staff and may_manage_passkeys(request.user):
        staff_with_passkeys = list(
            get_user_model()
            .objects.filter(is_staff=True, passkeys__isnull=False)
            .exclude(pk=request.user.pk)
            .annotate(passkey_count=Count("passkeys"))
            .order_by("username")
        )
    context = {
        "audience": audience,
        "ns": audience.namespace,
        "passkeys": list(request.user.passkeys.order_by("created_at", "pk")),
        "register_form": extra.pop("register_form", None) or RegisterForm(),
        "back": _back_link(request),
        "staff_with_passkeys": staff_with_passkeys,
        "nav": "passkeys",
        **extra,
    }
    return render(request, audience.template, context, status=status)


# The pages ---------------------------------------------------------------------------------------


@require_GET
def passkey_list(request: AuthenticatedHttpRequest, audience: Audience) -> HttpResponse:
    return _page(request, audience)


@require_POST
def register_options(request: AuthenticatedHttpRequest, audience: Audience) -> HttpResponse:
    """The first post of a registration: the name and the password again; answers the options for
    navigator.credentials.create and keeps their challenge in the session."""
    form = RegisterForm(request.POST)
    if not _wants_json(request):  # the form posted without its script
        error = "Adding a passkey needs JavaScript in this browser; nothing was added."
        return _page(request, audience, status=400, error=error, register_form=form)
    if not form.is_valid():
        return refusal(ErrorCode.INVALID_REQUEST, "Give the passkey a name and enter your password.", status=400)
    password_ok = _password_ok(request, form.cleaned_data["password"])
    if not password_ok:
        return refusal("wrong_password", PASSWORD_WORDS[password_ok], status=403 if password_ok is False else 429)
    name = form.cleaned_data["name"]
    if request.user.passkeys.filter(name=name).exists():
        return refusal("passkey_name_taken", f"You already have a passkey named {name!r}.", status=409)
    options, challenge = passkey_registration_options(person=request.user)
    request.session[PENDING_REGISTRATION] = {
        "challenge": bytes_to_base64url(challenge),
        "name": name,
        "at": time.time(),
    }
    return JsonResponse({"ok": True, "options": options})


@require_POST
def register(request: AuthenticatedHttpRequest, audience: Audience) -> JsonResponse:
    """The second post: the browser's new credential, verified against the challenge kept in the session."""
    pending = request.session.pop(PENDING_REGISTRATION, None)
    credential = request.POST.get("credential", "")
    if not isinstance(pending, dict) or time.time() - float(pending.get("at", 0)) > REAUTH_SECONDS:
        return refusal("reauthentication_required", "Enter your password again, then add the passkey.", status=409)
    if not credential or len(credential) > MAX_CREDENTIAL_CHARS:
        return refusal(ErrorCode.INVALID_REQUEST, "No passkey came from the browser.", status=400)
    try:
        passkey = passkey_register(
            person=request.user,
            name=pending["name"],
            credential=credential,
            challenge=base64url_to_bytes(pending["challenge"]),
        )
    except PasskeyError as error:
        return refusal(error.code, error.message, status=400)
    messages.success(request, f"Your passkey {passkey.name!r} is added.")
    target = reverse(f"{audience.namespace}:list")
    back = _back_link(request)
    return JsonResponse({"ok": True, "redirect": _with_next(target, back)})


@require_POST
def remove(request: AuthenticatedHttpRequest, audience: Audience, passkey_id: int) -> HttpResponse:
    form = PasswordForm(request.POST)
    password_ok = _password_ok(request, request.POST.get("password", "")) if form.is_valid() else False
    if not password_ok:
        words = PASSWORD_WORDS[password_ok] + " Nothing was removed."
        return _page(request, audience, status=403 if password_ok is False else 429, error=words)
    removed = passkey_remove(person=request.user, passkey_id=passkey_id)
    if removed is None:
        messages.info(request, "That passkey was removed already.")
    else:
        messages.success(request, f"Your passkey {removed.name!r} is removed.")
    return redirect(f"{audience.namespace}:list")


@require_POST
def lead_remove(request: AuthenticatedHttpRequest, audience: Audience, user_id: int) -> HttpResponse:
    """A lead removes every passkey of a staff member (a lost device); they are told by email."""
    if not may_manage_passkeys(request.user):
        return render(request, "console/forbidden.html", status=403)
    person = get_user_model().objects.filter(pk=user_id, is_staff=True).first()
    if person is None:
        return _page(request, audience, status=404, error="No such staff member.")
    form = PasswordForm(request.POST)
    password_ok = _password_ok(request, request.POST.get("password", "")) if form.is_valid() else False
    if not password_ok:
        return _page(request, audience, status=403 if password_ok is False else 429, error=PASSWORD_WORDS[password_ok])
    try:
        removed = passkeys_remove_for_lost_device(lead=request.user, person=person)
    except PasskeyError as error:
        return _page(request, audience, status=409, error=error.message)
    plural = "s" if len(removed) != 1 else ""
    messages.success(
        request,
        f"Removed {len(removed)} passkey{plural} of {person.get_username()}; they are told by email.",
    )
    return redirect(f"{audience.namespace}:list")


@require_POST
def step_up(request: AuthenticatedHttpRequest, audience: Audience) -> JsonResponse:
    """Options for navigator.credentials.get over a new single-use challenge that commits to the posted
    digests (`digest`, repeated, in order: one preview, or a bulk decision's list)."""
    form = StepUpOptionsForm(request.POST)
    if not form.is_valid():
        return refusal(ErrorCode.INVALID_REQUEST, " ".join(str(e) for e in form.non_field_errors()), status=400)
    try:
        options = step_up_options(person=request.user, digests=form.cleaned_data["digests"])
    except DecisionError as error:
        register_url = reverse(f"{audience.namespace}:list")
        back = _back_link(request)
        return refusal(
            error.code,
            error.message,
            status=409,
            register_url=_with_next(register_url, back),
            **error.facts,
        )
    return JsonResponse({"ok": True, "options": options})
