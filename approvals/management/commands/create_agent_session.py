from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from approvals.errors import ApplicationError
from approvals.services import agent_session_create


class Command(BaseCommand):
    help = "Mint an agent session for a person; prints the token alone on the last line."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--user", required=True)
        parser.add_argument("--tools", required=True, help="Comma-separated, e.g. refund_order,send_invoice")
        parser.add_argument("--ttl", type=int, default=None, help="Lifetime in seconds.")
        parser.add_argument("--label", default="")

    def handle(self, *args, user, tools, ttl, label, **options):  # type: ignore[no-untyped-def]
        person = get_user_model().objects.filter(username=user).first()
        if person is None:
            raise CommandError(f"No user named {user!r}.")
        names = [name.strip() for name in tools.split(",") if name.strip()]
        try:
            session, token = agent_session_create(user=person, tools=names, ttl_seconds=ttl, label=label)
        except ApplicationError as error:
            raise CommandError(error.message) from error
        self.stdout.write(
            f"Agent session for {person.username}: tools {', '.join(session.tools)}, "
            f"expires {session.expires_at:%Y-%m-%d %H:%M:%S %Z}. The token is shown once:"
        )
        self.stdout.write(token)
