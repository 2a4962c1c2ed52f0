"""The OAuth pages and documents: the consent page (the toolkit's authorization view, with the
agent session a consent mints) and the protected resource's metadata for /mcp."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import Application
from oauth2_provider.views import AuthorizationView, OAuthProtectedResourceMetadataView
from oauthlib.oauth2.rfc6749.errors import InvalidRequestError

from approvals.agents.oauth.sessions import (
    lifetime_choices,
    oauth_agent_session_create,
    oauth_client_host,
    oauth_tools_for,
)
from approvals.core.errors import ApplicationError
from approvals.core.registry import registry
from approvals.models import AgentSession


class ConsentForm(AllowForm):
    lifetime = forms.TypedChoiceField(
        coerce=int, widget=forms.RadioSelect, label="How long the assistant may act for you"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = lifetime_choices()
        self.fields["lifetime"].choices = choices
        self.fields["lifetime"].initial = choices[0][0]


class ConsentView(AuthorizationView):
    """GET /oauth/authorize/: who asks (the client's name and the host of its metadata document), what
    the token will allow (the customer's tools), for how long (a short list); POST: consent or refusal.

    The site's login comes first (LoginRequiredMixin, back here after it). The toolkit checks the
    request (client, redirect URI, PKCE with S256) before the page shows and again on the POST, so a
    tampered hidden field gets the error page or an error redirect, never a code."""

    template_name = "oauth/consent.html"
    form_class = ConsentForm

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        application = kwargs.get("application") or context.get("application")
        if application is None and self.request.method == "POST":
            application = Application.objects.filter(client_id=self.request.POST.get("client_id", "")).first()
        if application is not None:
            context["application"] = application
            context["client_host"] = oauth_client_host(application)
        context["tools"] = [
            {"name": name, "description": registry.actions[name].description}
            for name in oauth_tools_for(self.request.user)
        ]
        return context

    def render_to_response(self, context: dict[str, Any], **kwargs: Any) -> HttpResponse:
        """The consent form's answer redirects to the client's redirect URI, which the page's
        `form-action 'self'` would block: that one origin is added, once the client names it."""
        response: HttpResponse = super().render_to_response(context, **kwargs)
        application = context.get("application")
        form = context.get("form")
        redirect_uri = form["redirect_uri"].value() if form is not None else None
        if application is not None and redirect_uri and application.redirect_uri_allowed(redirect_uri):
            parts = urlsplit(redirect_uri)
            # django-csp reads this attribute of the response; HttpResponse does not declare it.
            response._csp_update = {"form-action": [f"{parts.scheme}://{parts.netloc}"]}  # type: ignore[attr-defined]  # django-csp's
        return response

    def form_valid(self, form: ConsentForm) -> HttpResponse:
        self._agent_session: AgentSession | None = None
        if form.cleaned_data.get("allow"):
            application = Application.objects.filter(client_id=form.cleaned_data["client_id"]).first()
            if application is None:
                form.add_error(None, "This client is not known here.")
                return self.form_invalid(form)
            try:
                self._agent_session = oauth_agent_session_create(
                    user=self.request.user, application=application, ttl_seconds=form.cleaned_data["lifetime"]
                )
            except ApplicationError as error:
                form.add_error(None, error.message)
                return self.form_invalid(form)
        response: HttpResponse = super().form_valid(form)
        session = self._agent_session
        if session is not None and not AgentSession.objects.filter(pk=session.pk, oauth_grant__isnull=False).exists():
            # The toolkit refused the request after all (an error redirect or page): no code holds it.
            from approvals.core.services import agent_sessions_revoke

            agent_sessions_revoke(session_id=session.pk, reason="oauth_authorization_refused")
        return response

    def validate_authorization_request(self, request: HttpRequest) -> tuple[list[str], dict[str, Any]]:
        """The toolkit's checks, and S256 as the only PKCE method before the page offers consent (the
        toolkit refuses `plain` only once the code is made)."""
        scopes, credentials = super().validate_authorization_request(request)
        if credentials.get("code_challenge_method") != "S256":
            raise OAuthToolkitError(
                error=InvalidRequestError(
                    description='Send a PKCE code_challenge with code_challenge_method "S256".',
                    state=credentials.get("state"),
                ),
                redirect_uri=credentials.get("redirect_uri"),
            )
        return scopes, credentials

    def create_authorization_response(
        self, request: HttpRequest, scopes: str, credentials: dict[str, Any], allow: bool
    ) -> Any:
        session = getattr(self, "_agent_session", None)
        if allow and session is not None:
            credentials = {**credentials, "agent_session_id": session.pk}
        return super().create_authorization_response(request, scopes, credentials, allow)


class McpResourceMetadataView(OAuthProtectedResourceMetadataView):
    """GET /.well-known/oauth-protected-resource (RFC 9728): the resource is /mcp, its authorization
    server this one."""

    def get_resource(self, request: HttpRequest) -> str:
        return request.build_absolute_uri(reverse("mcp"))

    def get_resource_documentation(self) -> str:
        return ""
