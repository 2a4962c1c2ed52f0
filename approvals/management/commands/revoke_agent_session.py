from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.core.services import agent_sessions_revoke


class Command(BaseCommand):
    help = "Revoke agent sessions: one token (its first characters) or every live session of a user."

    def add_arguments(self, parser: CommandParser) -> None:
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--token-prefix", help="The first characters of the token, as listed (agt_…).")
        target.add_argument("--user", help="Revoke every live session of this user.")

    def handle(self, *args: Any, token_prefix: str | None, user: str | None, **options: Any) -> None:
        if token_prefix is not None and len(token_prefix) < 8:
            raise CommandError("Give at least the first 8 characters of the token.")
        count = agent_sessions_revoke(token_prefix=token_prefix, username=user)
        if count == 0:
            raise CommandError("No live agent session matched; nothing was revoked.")
        self.stdout.write(self.style.SUCCESS(f"Revoked {count} agent session(s)."))
