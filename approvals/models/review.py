"""The staff's review work: notices owed to reviewers, claims, and the Slack messages and links."""

from django.conf import settings
from django.db import models

from approvals.models.previews import Preview


class ReviewNoticeKind(models.TextChoices):
    REVIEW_NEEDED = "review_needed", "Review needed"
    OVERDUE = "overdue", "Overdue (escalated)"


class ReviewNotice(models.Model):
    """One notification owed about one preview waiting for staff: made by the digest task, sent in
    batches (one email per person and one webhook message per URL, whatever the number of previews).
    A channel's time stays empty until that channel took the message, so a failure is retried."""

    preview = models.ForeignKey(Preview, on_delete=models.CASCADE, related_name="review_notices")
    kind = models.CharField(max_length=16, choices=ReviewNoticeKind.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    emailed_at = models.DateTimeField(null=True, blank=True)
    webhooks_sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["preview", "kind"], name="one_review_notice_per_kind")]

    def __str__(self) -> str:
        return f"{self.kind} notice for {self.preview_id}"


class ReviewClaim(models.Model):
    """A reviewer working a preview, so that two do not work the same one. Claims only guide people:
    the decision itself is still checked (and bound to the digest) by the services."""

    preview = models.OneToOneField(Preview, on_delete=models.CASCADE, primary_key=True, related_name="claim")
    claimed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    assigned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    claimed_at = models.DateTimeField(auto_now=True)

    class Meta:
        permissions = [("manage_review_claims", "Can release or take over another reviewer's claim")]

    def __str__(self) -> str:
        return f"{self.preview_id} claimed by {self.claimed_by}"


class InternalNote(models.Model):
    """A note staff keep on a preview for each other. Never shown to the customer nor to the agent (a
    rejection's note is what the customer reads); the audit log records that it was written and its
    digest, not its words."""

    preview = models.ForeignKey(Preview, on_delete=models.PROTECT, related_name="internal_notes")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    body = models.TextField(max_length=4000)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [models.CheckConstraint(condition=~models.Q(body=""), name="internal_note_not_empty")]

    def __str__(self) -> str:
        return f"Note by {self.author} on {self.preview_id}"


class SlackReviewMessage(models.Model):
    """The Slack message that shows a preview in the review channel (approvals.console.slack): where it
    is, so that every later change of the preview replaces it (chat.update) and no stale button stays.
    A burst's previews share one summary message without buttons (`with_buttons` false)."""

    preview = models.OneToOneField(Preview, on_delete=models.CASCADE, primary_key=True, related_name="slack_message")
    channel = models.CharField(max_length=32)
    ts = models.CharField(max_length=32, help_text="Slack's id of the message in its channel.")
    with_buttons = models.BooleanField(default=True)
    shown_status = models.CharField(max_length=32, help_text="The preview's status the message last showed.")
    posted_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    def __str__(self) -> str:
        return f"Slack message {self.channel}/{self.ts} for {self.preview_id}"


class SlackUserLink(models.Model):
    """A staff member's own Slack user, linked by them in the console; a click by that Slack user is
    theirs (before any match by email)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_link")
    slack_user_id = models.CharField(max_length=32, unique=True)
    linked_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.slack_user_id} is {self.user}"


class SlackSeenRequest(models.Model):
    """A signed Slack request already answered (its signature), so that a replay is refused. Rows older
    than the signature's five minutes of validity are deleted: a replay that late fails the timestamp."""

    signature = models.CharField(max_length=80, unique=True)
    seen_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"Slack request seen at {self.seen_at}"
