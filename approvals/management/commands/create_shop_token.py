from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.core.errors import ApplicationError
from approvals.site.shopdata.tokens import known_scopes, shop_token_create


class Command(BaseCommand):
    help = (
        "Mint a shop data API token (docs/shop-data.md). Prints its id, label and scopes, then the token "
        "alone on the last line (shp_…): it is shown once and only its hash is stored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--scopes",
            required=True,
            help="Comma-separated, e.g. orders:write,invoices:write,customers:write (a :read scope reads only).",
        )
        parser.add_argument(
            "--label", default="shop", help="Who holds it; the operator its changes are audited under (shop)."
        )

    def handle(self, *args: Any, scopes: str, label: str, **options: Any) -> None:
        try:
            shop_token, token = shop_token_create(scopes=scopes.split(","), label=label)
        except ApplicationError as error:
            known = ", ".join(known_scopes())
            raise CommandError(f"{error.message} (scopes: {known})") from error
        self.stdout.write(
            f"Shop token {shop_token.pk} {shop_token.token_prefix}… for {shop_token.label!r}: "
            f"{', '.join(shop_token.scopes)}. Keep it secret; it is not shown again."
        )
        self.stdout.write(token)
