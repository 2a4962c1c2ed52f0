from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from approvals.agents.webhooks import agent_session_webhook_set, webhook_url_check
from approvals.core.errors import ApplicationError
from approvals.core.services import agent_session_create


class Command(BaseCommand):
    help = "Mint an agent session for a person; prints the token alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True)
        parser.add_argument("--tools", required=True, help="Comma-separated, e.g. refund_order,send_invoice")
        parser.add_argument("--ttl", type=int, default=None, help="Lifetime in seconds.")
        parser.add_argument("--label", default="")
        parser.add_argument(
            "--webhook",
            default=None,
            metavar="URL",
            help="Post every preview transition there (Standard Webhooks); prints the secret.",
        )

    def handle(
        self, *args: Any, user: str, tools: str, ttl: int | None, label: str, webhook: str | None = None, **options: Any
    ) -> None:
        person = get_user_model().objects.filter(username=user).first()
        if person is None:
            raise CommandError(f"No user named {user!r}.")
        names = [name.strip() for name in tools.split(",") if name.strip()]
        try:
            if webhook is not None:
                webhook_url_check(webhook)
            with transaction.atomic():
                session, token = agent_session_create(user=person, tools=names, ttl_seconds=ttl, label=label)
                secret = agent_session_webhook_set(session, webhook) if webhook is not None else None
        except ApplicationError as error:
            raise CommandError(error.message) from error
        self.stdout.write(
            f"Agent session for {person.username}: tools {', '.join(session.tools)}, "
            f"expires {session.expires_at:%Y-%m-%d %H:%M:%S %Z}. The token is shown once:"
        )
        if secret is not None:
            self.stdout.write(f"Webhook {session.webhook_url}: verify each message with this secret, shown once:")
            self.stdout.write(f"webhook-secret: {secret}")
        self.stdout.write(token)
