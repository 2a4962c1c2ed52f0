from django.urls import path

from approvals.site.shopdata import console

app_name = "shop_tokens"

urlpatterns = [
    path("", console.shop_tokens, name="list"),
    path("<int:token_id>/revoke", console.shop_token_revoke, name="revoke"),
]
