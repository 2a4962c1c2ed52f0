"""`Authorization: Bearer shp_…` for the shop data API, and its throttle (per token)."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from approvals.agents.api.throttling import AgentSessionThrottle
from approvals.models import ShopToken
from approvals.operations import logs
from approvals.site.shopdata.tokens import shop_token_find, shop_token_hash

if TYPE_CHECKING:
    from drf_spectacular.openapi import AutoSchema


class ShopTokenAuthentication(authentication.BaseAuthentication):
    """A shop token acts as the shop's system, not as a person: `request.auth` is the ShopToken."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[AnonymousUser, ShopToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Send the header as `Authorization: Bearer shp_…`.")
        try:
            token = header[1].decode("ascii")
        except UnicodeDecodeError as error:
            raise exceptions.AuthenticationFailed("Invalid shop token.") from error
        shop_token = shop_token_find(token)
        # The lookup is by hash; the comparison below keeps the check constant-time as well.
        if shop_token is None or not hmac.compare_digest(shop_token.token_hash, shop_token_hash(token)):
            raise exceptions.AuthenticationFailed("Invalid shop token.")
        if shop_token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("This shop token was revoked.")
        logs.bind(shop_token=shop_token.pk)
        return AnonymousUser(), shop_token

    def authenticate_header(self, request: Request | None) -> str:
        return f'{self.keyword} realm="shop"'


def request_shop_token(request: Request) -> ShopToken:
    """The token HasShopToken let in: an annotation only."""
    return cast(ShopToken, request.auth)


class HasShopToken(BasePermission):
    """Only a request ShopTokenAuthentication authenticated; without one DRF answers 401 (with
    WWW-Authenticate). What the token may do (its scopes) the service checks: 403."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return isinstance(request.auth, ShopToken)


class ShopTokenThrottle(AgentSessionThrottle):
    """Per shop token (SHOP_THROTTLE_RATE), in the shared cache."""

    scope = "shop"

    def get_rate(self) -> str:
        return str(settings.SHOP_THROTTLE_RATE)

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if not isinstance(request.auth, ShopToken):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class ShopTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema names the shop token."""

    target_class = ShopTokenAuthentication
    name = "shopToken"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer", "description": "A shop data API token (shp_…)."}
