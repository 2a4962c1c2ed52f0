from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView

from approvals.agents.mcp_server import mcp_endpoint
from approvals.console.selectors import console_access
from approvals.console.slack_views import slack_interactions
from approvals.core.registry import registry
from approvals.site import transparency
from approvals.site.login import ThrottledLoginView
from approvals.site.passkeys.urls import account_patterns, console_patterns


def home(request: HttpRequest) -> HttpResponse:
    """Staff land on the console; a customer on the first action's page of their things (their
    orders), or on their requests when no action has one."""
    if console_access(user=request.user):
        return redirect("console:queue")
    homes = registry.customer_homes(request.user)
    return redirect(homes[0].url if homes else "approvals:mine")


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page says; the icon itself is a static file."""
    return redirect(static("favicon.ico"), permanent=True)


urlpatterns = [
    path("", home, name="home"),
    path("favicon.ico", favicon, name="favicon"),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/agent/", include("approvals.agents.api.urls")),
    path("api/shop/", include("approvals.site.shopdata.urls")),
    path("mcp", mcp_endpoint, name="mcp"),
    path("", include("approvals.agents.oauth.urls")),
    path("api/schema/", SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]), name="schema"),
    path("previews/", include("approvals.customers.urls")),
    path("orders/", include("refunds.urls")),
    path("console/shop-tokens/", include("approvals.site.shopdata.console_urls")),
    path("console/passkeys/", include(console_patterns)),
    path("account/passkeys/", include(account_patterns)),
    path("console/", include("approvals.console.urls")),
    path("console/payments/", include("refunds.console_urls")),
    path("payments/", include("refunds.payment_urls")),
    path("integrations/slack/interactions", slack_interactions, name="slack_interactions"),
    path("audit/checkpoint", transparency.checkpoint, name="audit_checkpoint"),
    re_path(r"^audit/tile/entries/(?P<path>.+)$", transparency.entries, name="audit_entries"),
    re_path(r"^audit/tile/(?P<path>.+)$", transparency.tile, name="audit_tile"),
]
if settings.ADMIN_ENABLED:
    urlpatterns.append(path("admin/", admin.site.urls))
