"""The plug-in point: actions register here in their AppConfig.ready(); the engine never imports them.

An action says how to parse its arguments, how to check them against trusted data,
what a person must approve, and how to execute an approved preview.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from django.core.exceptions import ImproperlyConfigured

from .errors import EffectLookupUnavailable

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
    from django.db.models import Model
    from rest_framework.serializers import Serializer

    from .models import Preview


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


@runtime_checkable
class Subject(Protocol):
    """What an action's subject row (an order, an invoice) offers the engine.

    `pk` names the row, `owner` is the person whose subject it is (the customer who confirms), and
    `version` is an integer the action raises on every change that matters to a preview: the engine
    records it in the preview and refuses to execute when it moved (`subject_changed`).
    """

    pk: Any
    version: int

    @property
    def owner(self) -> Any: ...


@dataclass(frozen=True)
class StaffRole:
    """A staff group an action needs and the permissions ("app_label.codename") its members hold.

    The action declares its roles (`Action.staff_roles`); the engine creates the groups and gives them
    these permissions after every migrate (approvals.staff_roles), never taking one away.
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


class Action(ABC):
    """Base class for an action kind. Subclasses override the hooks below."""

    name: str = ""
    description: str = ""
    #: The argument naming the subject (an order, an invoice), recorded with a refused proposal.
    subject_argument: str = ""
    arguments_serializer: type[Serializer]
    # Required: the permission ("app_label.codename") a staff member needs to see, approve, reject or
    # retry previews of this kind in the console. Declare it in the Meta.permissions of one of the
    # action's own models, and give it to a group in `staff_roles` (the engine creates the groups after
    # every migrate). `register_action` refuses an action without one.
    review_permission: str
    #: Whether this action's proposals carry an amount and currency (Proposal.amount_minor): the agent
    #: API's schema then documents `amount_minor` and `currency` in its preview. False for an action
    #: that moves no money.
    proposes_amount: bool = True
    #: Payload fields the console's search also looks in (text fields, e.g. an invoice's "recipient").
    searchable_payload_fields: tuple[str, ...] = ()
    #: The staff groups this action needs, with their permissions (see StaffRole).
    staff_roles: tuple[StaffRole, ...] = ()
    #: The codes of this action's failures (ExecutionFailure with `before_effect`) that are transient:
    #: nothing was asked of the outside world and the cause can go away (a gateway not configured yet),
    #: so a staff retry may mend them; the preview waits in "needs attention". Every other failure code
    #: is permanent (the preview fails). The engine's own `retries_exhausted` is always retryable.
    retryable_failure_codes: frozenset[str] = frozenset()
    #: MCP tool annotations (hints for clients, never trusted coming in): whether the action's effect,
    #: once approved, cannot be taken back (a refund, a sent email), and whether proposing the same
    #: arguments again has no further effect (the gateway answers with the same open preview).
    destructive_hint: bool = True
    idempotent_hint: bool = True

    def failure_is_retryable(self, code: str) -> bool:
        """Whether a staff retry may mend a failure with this code that came before any effect."""
        return code in self.retryable_failure_codes

    def customer_home(self, user: AbstractBaseUser | AnonymousUser) -> Link | None:
        """Where this person sees their things of this action (their orders), or None."""
        return None

    def console_links(self, user: AbstractBaseUser | AnonymousUser) -> list[Link]:
        """Console pages of this action's own that this staff member may use (reconciliation...)."""
        return []

    @abstractmethod
    def may_use(self, user: AbstractBaseUser) -> bool:
        """Whether this person may have the tool in an agent session at all."""
        ...

    @abstractmethod
    def propose(self, *, actor: AbstractBaseUser, arguments: dict[str, Any]) -> Proposal:
        """Check ownership and policy against trusted data; raise PolicyRefusal or return a Proposal."""
        ...

    @abstractmethod
    def lock_subject(self, preview: Preview) -> Model | None:
        """Lock and return the subject row (select_for_update); None if it disappeared."""
        ...

    def subject_version(self, subject: Model) -> int:
        return subject.version  # type: ignore[attr-defined]  # every subject model has a version field

    @abstractmethod
    def revalidate(self, *, preview: Preview, subject: Model) -> None:
        """Re-run the policy under lock before executing; raise PolicyRefusal to fail the preview."""
        ...

    #: Whether asking the outside world for the effect twice returns the first effect (a payment
    #: provider's idempotency key). If not (plain SMTP), the engine makes the effect while holding
    #: the preview's lock, so that two runs at once cannot both make it.
    idempotent_effect: bool = True

    @abstractmethod
    def perform(self, *, preview: Preview, subject: Model | None = None) -> dict[str, Any]:
        """Make the outside effect (pay, send) for an approved preview, holding no database locks.

        Must be idempotent per preview (e.g. the provider's idempotency key `refund:<preview id>`):
        after a crash or a time-out it is called again and must return the effect already made.
        Raise TransientExecutionError to retry later, ExecutionFailure to fail the preview.

        `subject` is the subject as this run read and checked it under lock just before (its lock
        is released: read only what the check covered), or None (a run resuming a started
        execution, or an effect made under the preview's lock): then read what you need.
        """
        ...

    @abstractmethod
    def record(self, *, preview: Preview, subject: Model, effect: dict[str, Any]) -> dict[str, Any]:
        """Write the effect into the shop's books under the executor's locks; return the result facts.

        Runs in a savepoint: a constraint it hits (say, the order was re-imported with less remaining)
        rolls back only the recording, and the execution goes to `effect_unrecorded` with the effect.
        """
        ...

    #: Whether find_effect can ask the outside world (the resolver's sweep only takes those actions).
    can_look_up_effect: bool = False

    def find_effect(self, *, preview: Preview) -> dict[str, Any] | None:
        """Look up, without making one, the effect an earlier attempt may have made: the same dict
        `perform` returns, or None when the outside world has none for this preview.

        Called before any attempt that follows an attempt of unknown outcome (a time-out, a worker
        that died, a lost lease). Raise TransientExecutionError when the lookup itself fails, and
        EffectLookupUnavailable (the default) when the outside world cannot be asked: the execution
        then waits for a person, since making the effect again could make it twice.
        """
        raise EffectLookupUnavailable(f"{self.name} cannot look up an earlier attempt's effect.")

    @abstractmethod
    def headline(self, preview: Preview) -> str:
        """One line in words: "Refund €5.00 on order o-12"."""
        ...

    @abstractmethod
    def display_rows(self, preview: Preview) -> list[DisplayRow]:
        """The exact facts a person approves, formatted for people."""
        ...

    def claim_standing_grant(self, preview: Preview) -> StandingGrant | None:
        """Consume an approval given in advance for exactly this preview, if there is one (under lock)."""
        return None

    def consequence(self, preview: Preview) -> str:
        """What happens when the person says yes, in words."""
        return ""

    @abstractmethod
    def preview_fields(self, preview: Preview) -> dict[str, Any]:
        """Action-specific fields of the agent API's preview object."""
        ...

    @abstractmethod
    def outcome_text(self, preview: Preview) -> str:
        """What happened, for the person, once executed."""
        ...

    def subject_changed_words(self, preview: Preview) -> str | None:
        """What the customer reads when their request went out of date because its subject changed,
        with what to do ("Your order changed after this request was made..."); None: the engine's words."""
        return None

    def outcome_title(self, preview: Preview) -> str | None:
        """A short title for an executed preview when "Completed" would say too much (a refund still
        processing at the bank, or one the bank failed afterwards); None keeps "Completed"."""
        return None

    # Staff review hooks. Everything they return must come from the database, never from the agent.

    def review_summary(self, preview: Preview) -> str:
        """One queue row in words: "Refund €120.00 on o-12 for customer “alice”, damaged".

        Called once per row of the queue: use only the preview and its `actor` (selected with it).
        """
        return self.headline(preview)

    def review_facts(self, preview: Preview) -> list[DisplayRow]:
        """Verified facts about the subject as it is now (order, customer, totals...)."""
        return []

    def policy_evaluation(self, preview: Preview) -> list[RuleResult]:
        """Each policy rule evaluated now against the subject, with its numbers."""
        return []

    def review_tables(self, preview: Preview) -> list[FactTable]:
        """Verified history of the subject, e.g. earlier refunds on the same order."""
        return []

    def review_document(self, preview: Preview) -> ReviewDocument | None:
        """The document exactly as it will be sent, rendered now from the subject; None if none."""
        return None

    # Spending limits (approvals.limits).

    #: Whether this action's amounts are money going out, counted by SPEND_LIMIT_AGENT_DAILY and
    #: SPEND_LIMIT_CUSTOMER_30D (a refund is; an invoice's total is only shown).
    counts_toward_spending_limits: bool = False

    def spending_reversed(self) -> Any:
        """Ids of this action's previews whose effect the outside world undid after execution (a refund
        that failed at the bank), as a queryset of preview ids: they no longer count toward the
        spending limits. None when there are none."""
        return None

    def customer_facts(self, preview: Preview) -> list[DisplayRow]:
        """Facts the person asked to confirm wants next to the request (an order's total and what
        remains after this refund), from the database, in their words."""
        return []

    def risk_flags(self, preview: Preview) -> list[RiskFlag]:
        """Warnings about this preview, from the database (drawn as warnings in the queue and detail)."""
        return self.risk_flags_many([preview]).get(preview.pk, [])

    def risk_flags_many(self, previews: list[Preview]) -> dict[Any, list[RiskFlag]]:
        """risk_flags for a page of previews, by preview id, in a few queries whatever their number."""
        return {}

    # Counter-proposals: a reviewer changes what may be changed instead of rejecting.

    def counter_fields(self, preview: Preview) -> list[CounterField]:
        """What a reviewer may change in this preview; none (the default) means no counter-proposals."""
        return []

    def counter_arguments(self, preview: Preview, values: dict[str, str]) -> dict[str, Any]:
        """The tool arguments of the counter-proposal: the preview's own with the reviewer's `values`
        (strings from the form). Raise PolicyRefusal for a value that cannot be used. The result goes
        through `propose` as the preview's actor, so the same policy decides."""
        from .errors import PolicyRefusal

        raise PolicyRefusal(f"A {self.name} preview cannot be changed by a reviewer.", code="counter_not_supported")

    def counter_words(self, preview: Preview, arguments: dict[str, Any]) -> str:
        """What the reviewer is about to propose, read back from the parsed `arguments` (the result of
        counter_arguments), for the confirmation step: "a refund of €4.50 instead of €10.00"."""
        changed = {name: value for name, value in arguments.items() if preview.payload.get(name) != value}
        return "; ".join(f"{name} {value}" for name, value in changed.items()) or "no change"


@dataclass
class ImportSection:
    """A top-level key of `import_shop_data`'s JSON file, with its item serializer and writer.

    `describe(item)` returns the subject id an item is audited under and a summary of what is stored for
    it now (None when nothing is): the import records it before and after every write that changed
    something. Keys starting with `_` are compared but never recorded (a password hash's fingerprint).

    A section with `record` is also served one item at a time by the shop data API
    (`/api/shop/<key>/<identity>`, docs/shop-data.md): `record(identity, lock)` returns the item as
    stored, in the item format, with its `version` (what `If-Match` names), or None when there is none;
    with `lock` true it locks what `write` changes first, in the caller's transaction. `key_field` names
    the item's identity field (`id`, `number`, `username`).
    """

    key: str
    item_serializer: type[Serializer]
    write: Callable[[dict[str, Any]], Any]
    order: int = 100
    subject_type: str = ""
    describe: Callable[[dict[str, Any]], tuple[str, dict[str, Any] | None]] | None = None
    audit_event: str = "shop_data_changed"
    key_field: str = ""
    record: Callable[[str, bool], dict[str, Any] | None] | None = None


@dataclass
class Registry:
    actions: dict[str, Action] = field(default_factory=dict)
    import_sections: dict[str, ImportSection] = field(default_factory=dict)

    def register_action(self, action: Action) -> None:
        if action.name in self.actions:
            raise ValueError(f"Action {action.name!r} is registered twice")
        if not getattr(action, "review_permission", ""):
            raise ImproperlyConfigured(
                f"Action {action.name!r} declares no review_permission: set it to the permission "
                '("app_label.codename", in the Meta.permissions of one of its own models) that staff need '
                "to decide its previews in the console."
            )
        self.actions[action.name] = action

    def action(self, name: str) -> Action | None:
        return self.actions.get(name)

    def register_import_section(self, section: ImportSection) -> None:
        self.import_sections[section.key] = section

    def ordered_import_sections(self) -> list[ImportSection]:
        return sorted(self.import_sections.values(), key=lambda s: s.order)

    def staff_roles(self) -> list[StaffRole]:
        """Every staff role the registered actions declare, once per group name (with the permissions
        every action gives it), in registration order."""
        permissions: dict[str, list[str]] = {}
        for action in self.actions.values():
            for role in action.staff_roles:
                held = permissions.setdefault(role.group, [])
                held.extend(p for p in role.permissions if p not in held)
        return [StaffRole(group, tuple(held)) for group, held in permissions.items()]

    def searchable_payload_fields(self) -> list[str]:
        names: list[str] = []
        for action in self.actions.values():
            names.extend(n for n in action.searchable_payload_fields if n not in names)
        return names

    def customer_homes(self, user: AbstractBaseUser | AnonymousUser) -> list[Link]:
        return [link for action in self.actions.values() if (link := action.customer_home(user)) is not None]

    def console_links(self, user: AbstractBaseUser | AnonymousUser) -> list[Link]:
        return [link for action in self.actions.values() for link in action.console_links(user)]


registry = Registry()
