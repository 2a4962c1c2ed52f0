from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.shortcuts import redirect
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView


def home(request):  # type: ignore[no-untyped-def]
    return redirect("refunds:orders")


urlpatterns = [
    path("", home, name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/agent/", include("approvals.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]), name="schema"),
    path("previews/", include("approvals.urls")),
    path("orders/", include("refunds.urls")),
    path("admin/", admin.site.urls),
]
