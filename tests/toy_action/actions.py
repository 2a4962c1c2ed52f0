"""`rename_board(board_id, title)`: an action with no money and no outside world, for the engine's tests."""

from __future__ import annotations

from typing import Any

from approvals.plugin import (
    EXPORT_AUDIT_PERMISSION,
    Action,
    ApprovalRole,
    DisplayRow,
    PolicyRefusal,
    Preview,
    Proposal,
    RefusalCode,
    RuleResult,
    StaffRole,
)

from .models import REVIEW_PERMISSION_CODENAME, Board
from .serializers import RenameBoardArguments

REVIEW_PERMISSION = f"toy_action.{REVIEW_PERMISSION_CODENAME}"
BOARD_REVIEWERS = "Board reviewers"
#: A title holding one of these words is checked by staff after the owner confirms.
REVIEW_WORDS = ("official",)


class RenameRefusal(RefusalCode):
    BOARD_UNAVAILABLE = "board_unavailable"
    BOARD_ARCHIVED = "board_archived"
    TITLE_BLANK = "title_blank"
    TITLE_UNCHANGED = "title_unchanged"


def needs_staff_review(title: str) -> bool:
    words = title.casefold().split()
    return any(word in words for word in REVIEW_WORDS)


def rename_policy_check(*, board: Board, title: str) -> None:
    """The rules on a board of the actor's own (the engine looked it up among theirs), first failure wins:
    not archived, a title that says something new."""
    if board.archived:
        raise PolicyRefusal(
            f"Board {board.pk} is archived; an archived board keeps its title.", code=RenameRefusal.BOARD_ARCHIVED
        )
    if not title.strip():
        raise PolicyRefusal(
            "The new title is blank; give the board a title with at least one letter.", code=RenameRefusal.TITLE_BLANK
        )
    if title == board.title:
        raise PolicyRefusal(f"Board {board.pk} is already called {title!r}.", code=RenameRefusal.TITLE_UNCHANGED)


class RenameBoardAction(Action):
    name = "rename_board"
    subject_argument = "board_id"
    description = (
        "Propose a new title for one of the signed-in person's boards. Nothing is renamed by this call: "
        "the owner confirms the exact new title in the browser first (and staff review titles with "
        f"{', '.join(repr(w) for w in REVIEW_WORDS)} in them). Report the status the answer gives."
    )
    arguments_serializer = RenameBoardArguments
    subject_model = Board
    subject_type = "board"
    subject_owner_field = "owner"
    subject_unavailable_code = RenameRefusal.BOARD_UNAVAILABLE
    subject_unavailable_message = "Board {subject_id} is not available: no such board may be renamed by you."
    review_permission = REVIEW_PERMISSION
    staff_roles = (StaffRole(BOARD_REVIEWERS, (REVIEW_PERMISSION, EXPORT_AUDIT_PERMISSION)),)
    # The console's search also finds a rename by the new title.
    searchable_payload_fields = ("title",)
    # A board can be renamed back: the tool's effect is not destructive.
    destructive_hint = False
    # Nothing outside the database: asking "was it made?" always has an answer (no, until recorded).
    can_look_up_effect = True

    def may_use(self, user: Any) -> bool:
        return bool(user.is_active)

    def propose(self, *, actor: Any, arguments: dict[str, Any]) -> Proposal:
        title = arguments["title"]
        board: Board = self.proposal_subject(actor=actor, subject_id=arguments["board_id"])
        rename_policy_check(board=board, title=title)
        required = [ApprovalRole.CUSTOMER.value]
        if needs_staff_review(title):
            required.append(ApprovalRole.STAFF.value)
        return Proposal(
            subject_type=self.subject_type,
            subject_id=board.pk,
            subject_version=board.version,
            payload={"board_id": board.pk, "title": title, "previous_title": board.title},
            required_approvals=required,
        )

    def revalidate(self, *, preview: Preview, subject: Any) -> None:
        rename_policy_check(board=subject, title=preview.payload["title"])

    def perform(self, *, preview: Preview, subject: Any = None) -> dict[str, Any]:
        # No outside world: the effect is the approved title itself, the same on every call.
        return {"title": preview.payload["title"], "reference": f"rename_board:{preview.pk}"}

    def find_effect(self, *, preview: Preview) -> dict[str, Any] | None:
        # Nothing is ever made outside the database, and the database holds the recording: an attempt that
        # did not record made nothing.
        return None

    def record(self, *, preview: Preview, subject: Any, effect: dict[str, Any]) -> dict[str, Any]:
        board: Board = subject
        previous = board.title
        board.title = effect["title"]
        board.version += 1
        board.save(update_fields=["title", "version"])
        return {"board_id": board.pk, "title": board.title, "previous_title": previous, "version": board.version}

    def headline(self, preview: Preview) -> str:
        return f"Rename board {preview.subject_id} to “{preview.payload['title']}”"

    def display_rows(self, preview: Preview) -> list[DisplayRow]:
        return [
            DisplayRow("Board", preview.subject_id),
            DisplayRow("Current title", preview.payload["previous_title"]),
            DisplayRow("New title", preview.payload["title"]),
        ]

    def consequence(self, preview: Preview) -> str:
        return f"Board {preview.subject_id} is called “{preview.payload['title']}” from then on."

    def preview_fields(self, preview: Preview) -> dict[str, Any]:
        return {
            "board_id": preview.payload["board_id"],
            "title": preview.payload["title"],
            "previous_title": preview.payload["previous_title"],
        }

    def outcome_text(self, preview: Preview) -> str:
        return f"Board {preview.subject_id} is now called “{(preview.result or {}).get('title', '')}”."

    def review_facts(self, preview: Preview) -> list[DisplayRow]:
        board = Board.objects.select_related("owner").filter(pk=preview.subject_id).first()
        if board is None:
            return [DisplayRow("Board", f"{preview.subject_id} no longer exists")]
        return [
            DisplayRow("Board", board.pk),
            DisplayRow("Owner", board.owner.get_username()),
            DisplayRow("Title now", board.title),
            DisplayRow("Archived", "yes" if board.archived else "no"),
            DisplayRow("Board version", f"{board.version} now, {preview.subject_version} when proposed"),
        ]

    def policy_evaluation(self, preview: Preview) -> list[RuleResult]:
        board = Board.objects.filter(pk=preview.subject_id).first()
        if board is None:
            return [RuleResult("1. Board exists", False, f"There is no board {preview.subject_id}.")]
        return [
            RuleResult(
                "1. Board belongs to the proposer",
                board.owner_id == preview.actor_id,
                f"{board.pk} belongs to user {board.owner_id}; the rename is for user {preview.actor_id}.",
            ),
            RuleResult("2. Board is not archived", not board.archived, f"Archived: {board.archived}."),
            RuleResult(
                "Board unchanged since the preview",
                board.version == preview.subject_version,
                f"Version {board.version} now, {preview.subject_version} when proposed.",
            ),
        ]
