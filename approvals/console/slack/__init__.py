"""Reviewing in Slack: every preview that starts waiting for staff is posted to SLACK_REVIEW_CHANNEL as a
Block Kit message (the console's summary, with Approve, Reject and "Open in the console"), and every later
change of the preview replaces that message (chat.update), so that no button stays after a decision.

Posting follows the reviewer digest's batching (approvals.console.notifications): the first preview that starts
waiting in a window of REVIEW_NOTIFY_BATCH_SECONDS publishes `approvals.slack_post_review` to run at the
window's end, and that run posts everything still waiting without a message. Up to MESSAGES_PER_BATCH
previews get a message each; a bigger burst gets one summary message without buttons (the queue decides
those). Beat runs the same task as a safety net: it also posts what a lost publication missed and
brings up to date every message that shows an earlier status than its preview's (a failed chat.update).

Slack's rate limits: a 429 stops every call until its Retry-After has passed (shared through the cache),
and the task is published again for then; nothing is retried at once.

The decisions themselves arrive at approvals.console.slack_views; this module maps the clicker to a staff
account (`staff_for_slack_user`) and decides through the one decision path (`slack_decide`).

Nothing runs unless SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET and SLACK_REVIEW_CHANNEL are all set.
"""

from approvals.console.slack.client import (
    APPROVE,
    KICK_KEY,
    LINK_MAX_AGE_SECONDS,
    LINK_SALT,
    MESSAGES_PER_BATCH,
    NOTE_BLOCK,
    NOTE_INPUT,
    OPEN_CONSOLE,
    PAUSE_KEY,
    POST_LOCK,
    POST_LOCK_SECONDS,
    POST_TASK,
    REJECT,
    REJECT_CALLBACK,
    ROWS_SHOWN,
    SLACK_FAILURES,
    STALE_UPDATES_PER_RUN,
    SUMMARY_LINES,
    UPDATE_TASK,
    SlackRateLimited,
    failure_words,
    paused_for,
    slack_call,
    slack_calls,
    slack_configured,
)
from approvals.console.slack.deciding import (
    UNMAPPED,
    ButtonValue,
    link_token,
    link_token_user,
    link_url,
    preview_for_button,
    reject_refusal,
    request_seen,
    review_channel,
    slack_decide,
    staff_for_slack_user,
    tell,
)
from approvals.console.slack.messages import (
    message_for,
    preview_summary,
    reject_modal,
    section_block,
)
from approvals.console.slack.sync import (
    SyncReport,
    message_update,
    publish_task,
    reviews_sync,
    slack_post_review,
    slack_update_review,
)

__all__ = [
    "APPROVE",
    "ButtonValue",
    "KICK_KEY",
    "LINK_MAX_AGE_SECONDS",
    "LINK_SALT",
    "MESSAGES_PER_BATCH",
    "NOTE_BLOCK",
    "NOTE_INPUT",
    "OPEN_CONSOLE",
    "PAUSE_KEY",
    "POST_LOCK",
    "POST_LOCK_SECONDS",
    "POST_TASK",
    "REJECT",
    "REJECT_CALLBACK",
    "ROWS_SHOWN",
    "SLACK_FAILURES",
    "STALE_UPDATES_PER_RUN",
    "SUMMARY_LINES",
    "SlackRateLimited",
    "SyncReport",
    "UNMAPPED",
    "UPDATE_TASK",
    "failure_words",
    "link_token",
    "link_token_user",
    "link_url",
    "message_for",
    "message_update",
    "paused_for",
    "preview_for_button",
    "preview_summary",
    "publish_task",
    "reject_modal",
    "reject_refusal",
    "request_seen",
    "review_channel",
    "reviews_sync",
    "section_block",
    "slack_call",
    "slack_calls",
    "slack_configured",
    "slack_decide",
    "slack_post_review",
    "slack_update_review",
    "staff_for_slack_user",
    "tell",
]
