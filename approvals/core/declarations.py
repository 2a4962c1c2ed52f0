"""What an action's hooks return and declare: the proposal a policy accepted, the facts and rows shown to
people, staff roles, links, standing grants. Plain frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Proposal:
    """What an action's policy accepted: the exact payload a person will approve (keywords only)."""

    subject_type: str
    subject_id: str
    subject_version: int
    payload: dict[str, Any]
    #: The amount the person approves, in minor units, and its ISO 4217 currency; both None for an
    #: action that moves no money (then nothing shows an amount, and no spending limit counts it).
    amount_minor: int | None = None
    currency: str | None = None
    #: Who must approve (ApprovalRole values): at least one.
    required_approvals: list[str]


@dataclass(frozen=True)
class StaffRole:
    """A staff group an action needs and the permissions ("app_label.codename") its members hold.

    The action declares its roles (`Action.staff_roles`); the engine creates the groups and gives them
    these permissions after every migrate (approvals.core.staff_roles), never taking one away.
    `import_shop_data` offers the declared group names for staff. A role whose permissions include the
    action's `review_permission` decides the action's previews in the console.
    """

    group: str
    permissions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Link:
    """A page of an action's own for a person (e.g. "My orders" for a customer). `key` marks it as the
    current page where a view passes the same `nav` to its template."""

    label: str
    url: str
    key: str = ""


@dataclass(frozen=True)
class StandingGrant:
    """An approval given in advance (e.g. staff's standing approval of an exact invoice/recipient pair)."""

    role: str
    approver: Any
    basis: str


@dataclass(frozen=True)
class DisplayRow:
    label: str
    value: str


@dataclass(frozen=True)
class RuleResult:
    """One policy rule evaluated against trusted data, with the numbers it compared."""

    rule: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class FactTable:
    """Verified rows from the database shown to a reviewer, e.g. earlier refunds on the order."""

    caption: str
    columns: list[str]
    rows: list[list[str]]
    empty: str = "None."


@dataclass(frozen=True)
class CounterField:
    """One thing a reviewer may change in a counter-proposal (e.g. the amount, or the recipient chosen
    from `choices`), shown as a form field in the console; its value reaches Action.counter_arguments."""

    name: str
    label: str
    current: str
    choices: list[str] = field(default_factory=list)
    hint: str = ""


@dataclass(frozen=True)
class RiskFlag:
    """Something a reviewer should look at twice (an unknown recipient, a first refund), from the database."""

    code: str
    text: str


@dataclass(frozen=True)
class ReviewDocument:
    """The exact message an action will hand over (e.g. the invoice email), rendered for a reviewer."""

    title: str
    recipients: list[str]
    subject: str
    html: str
    text: str
    attachment_name: str
    attachment_html: str
    matches_preview: bool


@dataclass(frozen=True)
class ProviderEvidence:
    """The outside world's own references to an executed preview's effect and its later events, for an
    evidence bundle (`Action.provider_evidence`): JSON values, read from the action's own records.

    `references` under the same key as the effect `perform` returned (or the result `record` returned)
    must hold the same value: the bundle's checker compares them with the sealed `executed` record. Give
    what changed since under another name (a refund's status now). `events` are the provider's messages
    about the effect (a payment provider's webhooks), each with its `event_id` and `type`; one the audit
    log recorded for the preview is compared with that record."""

    references: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
