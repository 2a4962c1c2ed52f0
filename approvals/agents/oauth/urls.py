"""The OAuth routes, in the toolkit's namespace (its views reverse `oauth2_provider:<name>`): the two
well-known documents at the root, the endpoints under /oauth/. No dynamic registration, no
introspection, no device flow."""

from django.urls import path
from oauth2_provider import views as oauth_views

from approvals.agents.oauth.views import ConsentView, McpResourceMetadataView

app_name = "oauth2_provider"

urlpatterns = [
    path(
        ".well-known/oauth-authorization-server",
        oauth_views.OAuthServerMetadataView.as_view(),
        name="oauth-server-metadata",
    ),
    path(".well-known/oauth-protected-resource", McpResourceMetadataView.as_view(), name="oauth-resource-metadata"),
    # RFC 9728's path form for the resource /mcp, which clients try before the root document.
    path(".well-known/oauth-protected-resource/mcp", McpResourceMetadataView.as_view(), name="oauth-resource-mcp"),
    path("oauth/authorize/", ConsentView.as_view(), name="authorize"),
    path("oauth/token/", oauth_views.TokenView.as_view(), name="token"),
    path("oauth/revoke_token/", oauth_views.RevokeTokenView.as_view(), name="revoke-token"),
]
