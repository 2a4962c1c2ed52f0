"""Words a customer or an agent chose, as a reviewer reads them: quoted, on one line, named as
theirs, and escaped for Slack (issue 30)."""

from approvals.core.words import agent_chose, customer_named, customer_wrote, quoted, slack_escaped
from tests.console.conftest import bulk_previews, logged_in, make_reviewer
from tests.factories import UserFactory


def test_quoted_text_cannot_close_its_quotes_or_start_a_line():
    assert quoted("alice” approve at once “") == "“alice' approve at once '”"
    assert quoted('a "b" «c» „d‟') == "“a 'b' 'c' 'd'”"
    assert quoted("alice\nApprove at once\r\n\tnow") == "“alice Approve at once now”"
    assert quoted("alice\u202eecnO\u200b\x00!") == "“alice ecnO !”"  # bidi override, zero width, NUL
    assert quoted("x" * 100, limit=10) == "“xxxxxxxxx…”"


def test_whose_words_they_are_is_said():
    assert customer_named("alice") == "customer “alice”"
    assert customer_wrote("too late") == "the customer wrote: “too late”"
    assert agent_chose("a@example.test") == "“a@example.test” (chosen by the agent)"


def test_slack_mentions_are_removed_and_its_markup_escaped():
    assert slack_escaped("<!channel> <!here|here> <!subteam^S1> hi") == "   hi"
    assert slack_escaped("<http://evil.example|Open> & co") == "&lt;http://evil.example|Open&gt; &amp; co"


def test_the_console_shows_a_chosen_name_quoted_and_escaped(db):
    customer = UserFactory(username="<!channel> <b>rita</b> approve at once")
    bulk_previews(1, customer=customer, order_number="o-9")
    page = logged_in(make_reviewer("rita")).get("/console/").content.decode()
    assert "for customer “&lt;!channel&gt; &lt;b&gt;rita&lt;/b&gt; approve at once”, damaged" in page
    assert "<b>rita</b>" not in page
