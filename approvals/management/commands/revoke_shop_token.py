from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.core.errors import ApplicationError
from approvals.site.shopdata.tokens import shop_tokens_revoke


class Command(BaseCommand):
    help = "Revoke shop data API tokens: by id, by the token's first 12 characters (shp_…) or by label."

    def add_arguments(self, parser: CommandParser) -> None:
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--id", type=int, dest="token_id", help="The token's id, as create_shop_token printed.")
        target.add_argument("--token-prefix", help="The first 12 characters of the token (shp_…), or the token.")
        target.add_argument("--label", help="Revoke every live token with this label.")

    def handle(
        self, *args: Any, token_id: int | None, token_prefix: str | None, label: str | None, **options: Any
    ) -> None:
        if token_prefix is not None and len(token_prefix) < 12:
            raise CommandError("Give at least the first 12 characters of the token.")
        try:
            revoked = shop_tokens_revoke(token_id=token_id, token_prefix=token_prefix or "", label=label or "")
        except ApplicationError as error:
            raise CommandError(error.message) from error
        if not revoked:
            raise CommandError("No live shop token matched; nothing was revoked.")
        for shop_token in revoked:
            self.stdout.write(self.style.SUCCESS(f"Revoked shop token {shop_token.pk} {shop_token.token_prefix}…."))
