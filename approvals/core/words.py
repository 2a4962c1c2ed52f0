"""Words a customer or an agent chose (a username, a decline note, a recipient, a session label), as
they reach a reviewer: quoted and said to be theirs, and escaped for the medium that carries them.

Reviewers act on what these messages say, so nothing someone else chose may read as the gateway's own
words: it is always inside typographic quotes it cannot close (quote marks in it become `'`), on one
line (control and format characters, line breaks and bidirectional overrides become spaces), of a
bounded length, and named as whose it is ("customer “alice”", "the customer wrote: “…”"). Each medium
then escapes the whole message its own way: HTML by Django's autoescape, Slack's mrkdwn by
slack_escaped (below), plain-text email needs nothing more.
"""

from __future__ import annotations

import re
import unicodedata

QUOTE_MARKS = re.compile('["“”„‟«»‹›〝〞＂]')
SLACK_SPECIAL = re.compile(r"<![^>]*>")  # <!channel>, <!here>, <!everyone>, <!subteam^…>, <!date^…>


def _one_line(text: str) -> str:
    visible = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in text)
    return " ".join(visible.split())


def quoted(text: str, *, limit: int = 80) -> str:
    """`text` inside “…” it cannot close, on one line, at most `limit` characters (then `…`)."""
    clean = QUOTE_MARKS.sub("'", _one_line(text))
    if len(clean) > limit:
        clean = clean[: limit - 1].rstrip() + "…"
    return f"“{clean}”"


def customer_named(username: str) -> str:
    """A customer's chosen name, as a reviewer reads it: `customer “alice”`."""
    return f"customer {quoted(username, limit=150)}"


def customer_wrote(note: str) -> str:
    """A customer's own note to the gateway, as a reviewer reads it."""
    return f"the customer wrote: {quoted(note, limit=500)}"


def agent_chose(text: str) -> str:
    """Something the agent chose (a recipient, a label), as a reviewer reads it."""
    return f"{quoted(text)} (chosen by the agent)"


def slack_escaped(text: str) -> str:
    """Text for Slack's (and Slack-compatible) `text`: its special mentions (`<!channel>`) removed,
    then `&`, `<` and `>` escaped, so nothing in it pings a channel or draws a link of its own."""
    return SLACK_SPECIAL.sub("", text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
