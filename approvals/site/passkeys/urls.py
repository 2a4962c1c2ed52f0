"""The same pages for two audiences: `console_passkeys` (/console/passkeys/, active staff) and
`account_passkeys` (/account/passkeys/, anyone signed in)."""

from django.urls import URLPattern, path

from approvals.site.passkeys import views
from approvals.site.passkeys.views import CUSTOMER, STAFF, Audience, audience_view


def _patterns(audience: Audience) -> list[URLPattern]:
    guarded = audience_view(audience)
    patterns = [
        path("", guarded(views.passkey_list), name="list"),
        path("register/options", guarded(views.register_options), name="register_options"),
        path("register", guarded(views.register), name="register"),
        path("<int:passkey_id>/remove", guarded(views.remove), name="remove"),
        path("step-up", guarded(views.step_up), name="step_up"),
    ]
    if audience.staff:
        patterns.append(path("people/<int:user_id>/remove", guarded(views.lead_remove), name="lead_remove"))
    return patterns


console_patterns = (_patterns(STAFF), STAFF.namespace)
account_patterns = (_patterns(CUSTOMER), CUSTOMER.namespace)
