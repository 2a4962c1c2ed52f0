"""Password guessing is paused on every login path: the login page, the admin's login, anything that
calls `authenticate()`.

The counting lives in an authentication backend, the one place every login path goes through. Each
attempt is counted per username, per client address and per (username, address) *before* the password
is checked, with the cache's atomic add and incr, so that parallel guesses cannot all read "under the
limit" first; an attempt whose password was right is taken off the counts again.

An address past the limit is paused for every username. A username past the limit is paused from every
address that tried it in the window; an address with no attempt on it yet still gets one try, up to
LOGIN_PAUSE_CLEAN_ADDRESS_TRIES such addresses per window, so that wrong passwords sent from anywhere
do not keep the person out. Each pause, as it begins, is an audit record (`login_paused`) for staff.

Hand-written rather than django-axes: axes checks the lockout before authenticating and records the
failure afterwards (on `user_login_failed`), so parallel guesses all pass its check, which is the hole
this module closes.
"""

from __future__ import annotations

import unicodedata
from typing import Any, NoReturn

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from approvals.core.digests import sha256_hex


def username_key(username: str) -> str:
    """Django's own normalization of a username (NFKC), case-folded: `bob`, `ｂｏｂ`, `𝐛𝐨𝐛` and `BOB`
    share one bucket."""
    return unicodedata.normalize("NFKC", username).casefold().strip()


def client_address(request: HttpRequest | None) -> str:
    """The client's address: REMOTE_ADDR, or the address the outermost of TRUSTED_PROXY_COUNT proxies
    saw, from the header they each append to. Entries further left were written by the client."""
    if request is None:
        return ""
    remote = request.META.get("REMOTE_ADDR", "")
    count = settings.TRUSTED_PROXY_COUNT
    if count <= 0:
        return remote
    hops = [hop.strip() for hop in request.META.get(settings.CLIENT_IP_HEADER, "").split(",") if hop.strip()]
    if len(hops) < count:
        # The request did not come through every trusted proxy; what it says about itself is not trusted.
        return remote
    return hops[-count]


def _counter_keys(request: HttpRequest | None, username: str) -> dict[str, str]:
    # Hashed: a username is user input of any length and alphabet, and cache keys have rules.
    name = sha256_hex(username_key(username))
    keys = {"user": f"login-attempts:user:{name}"}
    address = client_address(request)
    if address:
        hashed = sha256_hex(address)
        keys["addr"] = f"login-attempts:addr:{hashed}"
        keys["pair"] = f"login-attempts:pair:{name}:{hashed}"
    return keys


def _clean_address_tries_key(username: str) -> str:
    return f"login-attempts:clean:{sha256_hex(username_key(username))}"


def _pause_audit(scope: str, username: str, address: str, attempts: int) -> None:
    """One record as a pause begins (the attempt that passes the limit), so that a pause is visible
    to staff (the auditor's export, the admin's audit records) without one record per guess."""
    from approvals.core.services import audit_record
    from approvals.models import AuditEvent

    audit_record(
        event=AuditEvent.LOGIN_PAUSED,
        subject_type="login",
        subject_id=username_key(username)[:64],
        result={
            "scope": scope,
            "username": username_key(username)[:150],
            "address": address,
            "attempts": attempts,
            "window_seconds": settings.LOGIN_FAILURE_WINDOW_SECONDS,
        },
    )


def _count(key: str) -> int:
    cache.add(key, 0, timeout=settings.LOGIN_FAILURE_WINDOW_SECONDS)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=settings.LOGIN_FAILURE_WINDOW_SECONDS)
        return 1


def _uncount(key: str) -> None:
    try:
        cache.decr(key)
    except ValueError:
        pass


class ThrottledModelBackend(ModelBackend):
    """Django's model backend, behind per-username and per-address attempt counters."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        if username is None:
            username = kwargs.get(self._username_field(), "")
        if username is None or password is None:
            return None
        username = str(username)
        keys = _counter_keys(request, username)
        counts = {kind: _count(key) for kind, key in keys.items()}
        limit = settings.LOGIN_FAILURE_LIMIT
        address = client_address(request)
        if counts["user"] == limit + 1:
            _pause_audit("username", username, address, counts["user"])
        if counts.get("addr") == limit + 1:
            _pause_audit("address", username, address, counts["addr"])
        name_paused = counts["user"] > limit
        if "addr" not in counts:  # no address (authenticate() called without a request): the name decides
            refused = name_paused
        else:
            refused = counts["addr"] > limit or counts["pair"] > limit
            if not refused and name_paused:
                # This address's first attempt on the paused name gets checked, within the name's budget.
                refused = counts["pair"] > 1 or (
                    _count(_clean_address_tries_key(username)) > settings.LOGIN_PAUSE_CLEAN_ADDRESS_TRIES
                )
        if refused:
            self._refuse(request)
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None:
            for key in keys.values():
                _uncount(key)
        elif name_paused:
            self._refuse(request)  # a wrong password while paused is answered like the pause
        return user

    @staticmethod
    def _refuse(request: HttpRequest | None) -> NoReturn:
        if request is not None:
            request.login_throttled = True  # type: ignore[attr-defined]  # read back by ThrottledLoginView
        # Stops authenticate() at once: no other backend is tried, and user_login_failed is sent.
        raise PermissionDenied("Too many login attempts.")

    @staticmethod
    def _username_field() -> str:
        from django.contrib.auth import get_user_model

        return get_user_model().USERNAME_FIELD


class ThrottledLoginView(LoginView):
    """Django's login form; a throttled attempt is answered 429 with a message that says so."""

    redirect_authenticated_user = True

    def form_invalid(self, form: Any) -> HttpResponse:
        if not getattr(self.request, "login_throttled", False):
            return super().form_invalid(form)
        window = settings.LOGIN_FAILURE_WINDOW_SECONDS
        form.errors.clear()
        form.add_error(None, f"Too many failed attempts. Wait {window // 60} minutes, then try again.")
        response = self.render_to_response(self.get_context_data(form=form), status=429)
        response["Retry-After"] = str(window)
        return response
