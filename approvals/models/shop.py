"""The shop data API's service tokens and the answers it gave under an Idempotency-Key."""

from django.db import models


class ShopToken(models.Model):
    """A service token of the shop data API (`/api/shop/…`): the shop's own system, not a person. Only
    the token's hash is stored; its label is the operator of everything it changes (docs/shop-data.md)."""

    token_hash = models.CharField(max_length=64, unique=True)
    token_prefix = models.CharField(max_length=16, help_text="First characters, to recognise a token.")
    label = models.CharField(max_length=200)
    scopes = models.JSONField(default=list, help_text="e.g. orders:write, customers:read")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        permissions = [("manage_shop_tokens", "Can see and revoke the shop data API's tokens")]

    def __str__(self) -> str:
        return f"{self.token_prefix}… ({self.label})"


class ShopIdempotencyKey(models.Model):
    """The answer a shop data API write gave under an `Idempotency-Key`, per token: the same key with the
    same request gets it again; with another request it is refused (docs/shop-data.md)."""

    token = models.ForeignKey(ShopToken, on_delete=models.CASCADE, related_name="idempotency_keys")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the method, path, If-Match and body.")
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["token", "key"], name="shop_idempotency_key_once")]

    def __str__(self) -> str:
        return f"{self.key} of {self.token_id}"
