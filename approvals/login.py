"""Django's login form, paused for a while after repeated failures (per username and per address).

Hand-written because the usual package (django-axes) needs the request in every
authenticate() call, which the rest of the project and its tests don't pass.
"""

from django.conf import settings
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse


def _failure_keys(request: HttpRequest) -> list[str]:
    username = request.POST.get("username", "")[:150].strip().lower()
    address = request.META.get("REMOTE_ADDR", "")
    return [f"login-failures:user:{username}", f"login-failures:addr:{address}"]


class ThrottledLoginView(LoginView):
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:  # type: ignore[no-untyped-def]
        keys = _failure_keys(request)
        window = settings.LOGIN_FAILURE_WINDOW_SECONDS
        if any((cache.get(key) or 0) >= settings.LOGIN_FAILURE_LIMIT for key in keys):
            form = self.get_form()
            form.errors.clear()
            form.add_error(
                None,
                f"Too many failed attempts. Wait {window // 60} minutes, then try again.",
            )
            response = self.render_to_response(self.get_context_data(form=form), status=429)
            response["Retry-After"] = str(window)
            return response
        response = super().post(request, *args, **kwargs)
        if response.status_code == 200:  # the form was shown again: the login failed
            for key in keys:
                cache.add(key, 0, timeout=window)
                cache.incr(key)
        else:
            cache.delete(keys[0])
        return response
