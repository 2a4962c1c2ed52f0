from approvals.plugin import StrictCharField, StrictSerializer, SubjectIdField

TITLE_MAX_LENGTH = 100


class RenameBoardArguments(StrictSerializer):
    """What the agent may send: the board and its new title. Nothing else, no defaults."""

    board_id = SubjectIdField(help_text="The board's id as its owner sees it, e.g. b-1.")
    title = StrictCharField(
        min_length=1, max_length=TITLE_MAX_LENGTH, help_text="The board's new title, exactly as it will read."
    )
