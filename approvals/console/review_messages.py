"""What reviewers are told and where it links: the items of a digest, its emails to the deciding group and
to REVIEW_ESCALATE_EMAILS, the Standard Webhooks body with its Slack-compatible `text`, and the absolute
URLs of the console's and the customer's pages."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db.models import Q
from django.urls import reverse

from approvals.core.money import format_minor
from approvals.core.registry import registry
from approvals.core.words import slack_escaped
from approvals.models import Preview, ReviewNoticeKind

TEXT_LINES = 20  # previews listed one by one in the Slack-compatible text; the rest are counted


WEBHOOK_TYPES: dict[str, str] = {
    ReviewNoticeKind.REVIEW_NEEDED: "review.needed",
    ReviewNoticeKind.OVERDUE: "review.overdue",
}


def absolute(path: str) -> str:
    return settings.PUBLIC_BASE_URL.rstrip("/") + path


def console_url(preview: Preview) -> str:
    return absolute(reverse("console:preview", kwargs={"preview_id": preview.pk}))


def customer_url(preview: Preview) -> str:
    return absolute(reverse("approvals:preview", kwargs={"preview_id": preview.pk}))


@dataclass(frozen=True)
class Item:
    """One preview in a message, in words and as the webhook's JSON."""

    preview: Preview
    summary: str
    url: str
    flags: list[str]

    def line(self) -> str:
        """The line of a plain-text email. The summary quotes and names what the customer or the agent
        chose (approvals.core.words), on one line, so it cannot pass for the gateway's own words."""
        flags = f" [{'; '.join(self.flags)}]" if self.flags else ""
        return f"- {self.summary}{flags}: {self.url}"

    def slack_line(self) -> str:
        """The line of the Slack-compatible `text`: the same, with Slack's mentions and links disarmed."""
        return slack_escaped(self.line())

    def as_json(self) -> dict[str, Any]:
        p = self.preview
        return {
            "id": str(p.pk),
            "action": p.action,
            "summary": self.summary,
            "amount_minor": p.amount_minor,
            "currency": p.currency,
            "amount": format_minor(p.amount_minor, p.currency) if p.amount_minor is not None and p.currency else None,
            "status": p.status,
            "waiting_since": p.status_changed_at.isoformat(),
            "expires_at": p.expires_at.isoformat(),
            "url": self.url,
            "risk_flags": self.flags,
        }


def digest_items(previews: list[Preview]) -> list[Item]:
    by_action: dict[str, list[Preview]] = defaultdict(list)
    for preview in previews:
        by_action[preview.action].append(preview)
    flags: dict[Any, list[str]] = {}
    for name, group in by_action.items():
        action = registry.action(name)
        if action is not None:
            for pk, found in action.risk_flags_many(group).items():
                flags[pk] = [flag.text for flag in found]
    items = []
    for preview in previews:
        action = registry.action(preview.action)
        summary = action.review_summary(preview) if action else f"{preview.action} on {preview.subject_id}"
        items.append(Item(preview, summary, console_url(preview), flags.get(preview.pk, [])))
    return items


def reviewers(action_name: str) -> Any:
    """The active staff who may decide this kind of action (the deciding group's members, and anyone
    holding the permission directly)."""
    action = registry.action(action_name)
    permission = action.review_permission if action else "approvals.review_preview"
    app_label, codename = permission.split(".", 1)
    holds = Q(groups__permissions__codename=codename, groups__permissions__content_type__app_label=app_label) | Q(
        user_permissions__codename=codename, user_permissions__content_type__app_label=app_label
    )
    people = get_user_model().objects.filter(is_active=True, is_staff=True)
    return people.filter(holds | Q(is_superuser=True)).distinct().order_by("username")


def reviewers_of(action_name: str) -> list[Any]:
    """Those of them with an email address."""
    return list(reviewers(action_name).exclude(email=""))


def _heading(kind: str, count: int) -> str:
    noun = "preview waits" if count == 1 else "previews wait"
    if kind == ReviewNoticeKind.OVERDUE:
        hours = settings.REVIEW_ESCALATE_AFTER_SECONDS / 3600
        return f"Overdue: {count} {noun} for staff review for more than {hours:g} hours"
    return f"{count} {noun} for staff review"


def _email(subject: str, items: list[Item], to: list[str], intro: str) -> EmailMessage:
    body = "\n".join(
        [intro, "", *[item.line() for item in items], "", f"The review queue: {absolute(reverse('console:queue'))}"]
    )
    return EmailMessage(subject=subject, body=body, from_email=settings.DEFAULT_FROM_EMAIL, to=to)


def reviewer_emails(items: list[Item]) -> list[EmailMessage]:
    per_person: dict[Any, tuple[Any, list[Item]]] = {}
    for name in sorted({item.preview.action for item in items}):
        for person in reviewers_of(name):
            mine = [i for i in items if i.preview.action == name and i.preview.actor_id != person.pk]
            if mine:
                per_person.setdefault(person.pk, (person, []))[1].extend(mine)
    return [
        _email(
            f"[{settings.SHOP_NAME}] {_heading(ReviewNoticeKind.REVIEW_NEEDED, len(mine))}",
            mine,
            [person.email],
            f"Hello {person.get_username()}, these wait for a staff decision. Each link opens the exact preview:",
        )
        for person, mine in per_person.values()
    ]


def escalation_emails(items: list[Item]) -> list[EmailMessage]:
    if not settings.REVIEW_ESCALATE_EMAILS:
        return []
    subject = f"[{settings.SHOP_NAME}] {_heading(ReviewNoticeKind.OVERDUE, len(items))}"
    intro = "Nobody has decided these yet. Each link opens the exact preview:"
    return [_email(subject, items, list(settings.REVIEW_ESCALATE_EMAILS), intro)]


def webhook_body(kind: str, items: list[Item]) -> dict[str, Any]:
    heading = _heading(kind, len(items))
    lines = [item.slack_line() for item in items[:TEXT_LINES]]
    if len(items) > TEXT_LINES:
        lines.append(f"… and {len(items) - TEXT_LINES} more in the queue: {absolute(reverse('console:queue'))}")
    return {
        "type": WEBHOOK_TYPES[kind],
        "count": len(items),
        "queue_url": absolute(reverse("console:queue")),
        "previews": [item.as_json() for item in items],
        "text": heading + ":\n" + "\n".join(lines),
    }
