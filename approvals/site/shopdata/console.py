"""The console's page of shop data API tokens: staff with `approvals.manage_shop_tokens` see every token
(never the token itself, only its first characters) and revoke one."""

from __future__ import annotations

from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals.models import ShopToken
from approvals.site.shopdata.tokens import shop_tokens_revoke

MANAGE_SHOP_TOKENS = "approvals.manage_shop_tokens"


def _manager_required(view: Any) -> Any:
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (request.user.is_staff and request.user.has_perm(MANAGE_SHOP_TOKENS)):
            return render(request, "console/forbidden.html", status=403)
        return view(request, *args, **kwargs)

    return wrapper


@_manager_required
@require_GET
def shop_tokens(request: HttpRequest) -> HttpResponse:
    tokens = ShopToken.objects.order_by("revoked_at", "-created_at")
    return render(request, "console/shop_tokens.html", {"tokens": tokens, "nav": "shop_tokens"})


@_manager_required
@require_POST
def shop_token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    revoked = shop_tokens_revoke(token_id=token_id, revoked_by=request.user)  # type: ignore[arg-type]  # signed in: _manager_required
    if revoked:
        messages.success(request, f"Revoked the shop token {revoked[0].token_prefix}… ({revoked[0].label}).")
    else:
        messages.info(request, "That shop token had already been revoked.")
    return redirect("shop_tokens:list")
