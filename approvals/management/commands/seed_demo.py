from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.core.registry import registry
from approvals.core.services import agent_session_create, agent_sessions_revoke
from approvals.management.commands.import_shop_data import operator_name
from approvals.models import AgentSession
from approvals.site.shop_import import ShopDataInvalid, shop_data_import

DEMO_FILE = Path(settings.BASE_DIR) / "demo" / "shop.json"


class Command(BaseCommand):
    help = "Load the seed documents' demo shop (alice, bob, o-12, o-17, ORD-4417, INV-17) and mint a token for alice."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-token", action="store_true", help="Do not mint an agent token.")
        parser.add_argument("--operator", help="Who loads the demo, for the audit log (required unless DEBUG).")
        parser.add_argument(
            "--reload",
            action="store_true",
            help="Import the demo file again over a demo that was already loaded (refused once refunds were made).",
        )

    def handle(self, *args: Any, no_token: bool, reload: bool, operator: str | None = None, **options: Any) -> None:
        name = operator_name(operator)
        users = get_user_model().objects
        if users.filter(username="alice").exists() and not reload:
            # What was done in the demo (refunds, sends) stays: re-importing the file would put the
            # orders back as they were and contradict the gateway's ledger.
            self.stdout.write(
                "The demo shop is already loaded; what was done in it is kept (make demo-reset starts over)."
            )
        else:
            try:
                summary = shop_data_import(DEMO_FILE.read_text(encoding="utf-8"), operator=name)
            except ShopDataInvalid as invalid:
                raise CommandError("\n".join(invalid.problems)) from invalid
            for key, counts in summary.items():
                self.stdout.write(f"{key}: " + ", ".join(f"{n} {o}" for o, n in sorted(counts.items())))
        if no_token:
            return
        alice = users.get(username="alice")
        # One demo token at a time: the previous run's is revoked, so re-running never hits the session cap.
        for session in AgentSession.objects.filter(user=alice, label="demo", revoked_at__isnull=True):
            agent_sessions_revoke(session_id=session.pk)
        tools = [name for name, action in registry.actions.items() if action.may_use(alice)]
        _session, token = agent_session_create(user=alice, tools=tools, label="demo")
        self.stdout.write(f"Agent token for alice (tools: {', '.join(tools)}):")
        self.stdout.write(token)
