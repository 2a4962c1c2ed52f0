"""Shop data API tokens: minted for the shop's own system (`manage.py create_shop_token`), stored as a
SHA-256 hash only, limited to scopes, revoked from the command line or the console; both audited."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from approvals.core.digests import sha256_hex
from approvals.core.errors import ApplicationError
from approvals.core.registry import registry
from approvals.core.services import audit_record
from approvals.models import AuditEvent, ShopToken

if TYPE_CHECKING:
    from django.contrib.auth.models import User

TOKEN_PREFIX = "shp_"
READ, WRITE = "read", "write"


def shop_token_hash(token: str) -> str:
    return sha256_hex(token)


def served_sections() -> list[str]:
    """The import sections the API serves one record at a time: those with a `record` hook."""
    return [section.key for section in registry.ordered_import_sections() if section.record is not None]


def known_scopes() -> list[str]:
    return [f"{key}:{mode}" for key in served_sections() for mode in (READ, WRITE)]


def scope_allows(scopes: list[str], *, section: str, write: bool) -> bool:
    """`<section>:write` allows reading and writing the section's records; `<section>:read` reading only."""
    if f"{section}:{WRITE}" in scopes:
        return True
    return not write and f"{section}:{READ}" in scopes


def scopes_parse(text: str) -> list[str]:
    """`orders:write,customers:read` as a sorted list; an unknown scope is refused with the known ones."""
    scopes = sorted({part.strip() for part in text.split(",") if part.strip()})
    if not scopes:
        raise ApplicationError("Name at least one scope.", code="no_scopes", known=known_scopes())
    unknown = [scope for scope in scopes if scope not in known_scopes()]
    if unknown:
        raise ApplicationError(
            f"Unknown scope {', '.join(unknown)}; the scopes are {', '.join(known_scopes())}.",
            code="unknown_scope",
            known=known_scopes(),
        )
    return scopes


@transaction.atomic
def shop_token_create(*, scopes: list[str], label: str, created_by: User | None = None) -> tuple[ShopToken, str]:
    """Mint a token; it is returned once and only its hash is stored. The label names the shop system
    that holds it: it is the operator of everything the token changes."""
    label = label.strip()
    if not label:
        raise ApplicationError("A shop token needs a label (the operator its changes are audited under).")
    scopes = scopes_parse(",".join(scopes))
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    shop_token = ShopToken.objects.create(
        token_hash=shop_token_hash(token), token_prefix=token[:12], label=label, scopes=scopes
    )
    audit_record(
        event=AuditEvent.SHOP_TOKEN_CREATED,
        actor=created_by,
        subject_type="shop_token",
        subject_id=str(shop_token.pk),
        result={"operator": label, "token_prefix": shop_token.token_prefix, "scopes": scopes},
    )
    return shop_token, token


def shop_token_find(token: str) -> ShopToken | None:
    """The token (revoked or not) whose hash this is, or None."""
    return ShopToken.objects.filter(token_hash=shop_token_hash(token)).first()


def shop_tokens_revoke(
    *, token_id: int | None = None, token_prefix: str = "", label: str = "", revoked_by: User | None = None
) -> list[ShopToken]:
    """Revoke the live tokens with this id, token prefix (12 characters or more) or label; each is
    audited. Its next call gets a 401."""
    tokens = ShopToken.objects.filter(revoked_at__isnull=True)
    if token_id is not None:
        tokens = tokens.filter(pk=token_id)
    elif len(token_prefix) >= 12:
        tokens = tokens.filter(token_prefix=token_prefix[:12])
    elif label:
        tokens = tokens.filter(label=label)
    else:
        raise ApplicationError("Name the token by its id, its first 12 characters or its label.")
    revoked = []
    with transaction.atomic():
        for shop_token in tokens.select_for_update().order_by("pk"):
            shop_token.revoked_at = timezone.now()
            shop_token.save(update_fields=["revoked_at"])
            audit_record(
                event=AuditEvent.SHOP_TOKEN_REVOKED,
                actor=revoked_by,
                subject_type="shop_token",
                subject_id=str(shop_token.pk),
                result={"operator": shop_token.label, "token_prefix": shop_token.token_prefix},
            )
            revoked.append(shop_token)
    return revoked
