"""The `Action` base class: the hooks an action overrides, with their defaults, and what the engine does
for every action (the owner-scoped lookup of its subject, the lock, the version)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from django.db.models import Manager, QuerySet
from django.db.models.expressions import RawSQL

from approvals.core.errors import EffectLookupUnavailable, ErrorCode, PolicyRefusal
from approvals.core.rows import fetch_one

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
    from django.db.models import Model
    from rest_framework.serializers import Serializer

    from approvals.models import Preview

from approvals.core.declarations import (
    CounterField,
    DisplayRow,
    FactTable,
    Link,
    Proposal,
    ProviderEvidence,
    ReviewDocument,
    RiskFlag,
    RuleResult,
    StaffRole,
    StandingGrant,
)


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
    proposes_amount: bool = False
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

    # The subject: the row the action acts on, named here so that the engine looks it up, refuses it
    # and locks it the same way for every action.

    #: The model of the subject (an order, an invoice).
    subject_model: ClassVar[type[Model]]
    #: A short word for the subject (`Proposal.subject_type`, the console's audit page per subject).
    subject_type: ClassVar[str] = ""
    #: The field holding the id people see (`Proposal.subject_id`, e.g. an order's `number`).
    subject_id_field: ClassVar[str] = "pk"
    #: The field naming the person whose subject it is (the customer who confirms).
    subject_owner_field: ClassVar[str] = "owner"
    #: The integer field the action raises on every change that matters to a preview.
    subject_version_field: ClassVar[str] = "version"
    #: The refusal for a subject the actor may not act on: one answer, code and words, for a subject of
    #: someone else's and for one that does not exist, so that nobody learns which ids exist.
    #: `{subject_type}` and `{subject_id}` are filled in.
    subject_unavailable_code: ClassVar[str] = ErrorCode.SUBJECT_UNAVAILABLE
    subject_unavailable_message: ClassVar[str] = "The {subject_type} {subject_id} is not available to you."

    def subject_queryset(self, actor: Any) -> QuerySet[Any]:
        """The subjects this person may act on: their own. Override to widen it (staff who may act on
        any subject) or narrow it; a proposal's lookup and the lock before execution both use it.
        This default also takes the person's primary key instead of the person."""
        return self.subject_model._default_manager.filter(**{self.subject_owner_field: actor})

    def proposal_subject_queryset(self, actor: Any) -> QuerySet[Any]:
        """What a proposal reads the subject from: `subject_queryset`, which an action may narrow or
        widen for proposals alone."""
        return self.subject_queryset(actor)

    def proposal_subject_columns(self, subject_id: Any) -> dict[str, tuple[str, Sequence[Any]]]:
        """Scalar subqueries (SQL and parameters) a proposal reads with its subject, in the same query, for
        the policy: each becomes an attribute of the subject (refunds read what is being paid right now,
        `amount_in_flight_column`). None by default."""
        return {}

    def subject_unavailable(self, subject_id: Any) -> PolicyRefusal:
        message = self.subject_unavailable_message.format(subject_type=self.subject_type, subject_id=subject_id)
        return PolicyRefusal(message, code=self.subject_unavailable_code)

    def proposal_subject(self, *, actor: Any, subject_id: Any) -> Any:
        """The subject a proposal names, among those the actor may act on, in one query, with its
        `proposal_subject_columns`; raises `subject_unavailable` (the same for a foreign subject and a
        missing one).

        Every proposal asks it, so with the default scope (the actor's own subjects, through a plain
        manager) its statement is built once (approvals.core.rows); an action that changes the scope gets
        its queryset compiled by the ORM."""
        columns = self.proposal_subject_columns(subject_id)
        if self._plain_own_scope():
            subject = fetch_one(
                self.subject_model,
                extra=columns,
                **{self._owner_name(): getattr(actor, "pk", actor), self._id_name(): subject_id},
            )
        else:
            subject = (
                self.proposal_subject_queryset(actor)
                .annotate(**{name: RawSQL(sql, params) for name, (sql, params) in columns.items()})
                .filter(**{self.subject_id_field: subject_id})
                .first()
            )
        if subject is None:
            raise self.subject_unavailable(subject_id)
        return subject

    def _plain_own_scope(self) -> bool:
        """Whether a proposal's subject is looked up as the defaults do: the actor's own, through a manager
        that filters nothing, by fields of the subject's own table (no lookup across a relation)."""
        cls = type(self)
        return (
            cls.subject_queryset is Action.subject_queryset
            and cls.proposal_subject_queryset is Action.proposal_subject_queryset
            and self._plain_manager()
        )

    def _plain_manager(self) -> bool:
        """Whether the subject's default manager filters nothing and its id and owner fields are its own
        table's (no lookup across a relation)."""
        manager = self.subject_model._default_manager
        return (
            "__" not in self.subject_id_field
            and "__" not in self.subject_owner_field
            and type(manager).get_queryset is Manager.get_queryset
            and getattr(type(manager), "_queryset_class", None) is QuerySet
        )

    def lock_subject(self, preview: Preview) -> Model | None:
        """Lock and return the subject (select_for_update) as the preview's actor may act on it now;
        None if it disappeared or is no longer theirs: the checks before execution then refuse it as
        unavailable, so the owner's re-check is the lock itself.

        Every execution locks its subject twice (here and in `lock_subject_to_record`), so with the
        default scope and a unique subject id the statement is built once (approvals.core.rows)."""
        # The default scope needs only the owner's id, which the preview holds: no read of the person.
        own_scope = type(self).subject_queryset is Action.subject_queryset
        if own_scope and self._plain_unique_lookup():
            return fetch_one(
                self.subject_model,
                lock=True,
                extra=None,
                **{self._owner_name(): preview.actor_id, self._id_name(): preview.subject_id},
            )
        actor = preview.actor_id if own_scope else preview.actor
        return (
            self.subject_queryset(actor)
            .select_for_update(of=("self",))
            .filter(**{self.subject_id_field: preview.subject_id})
            .first()
        )

    def lock_subject_to_record(self, preview: Preview) -> Model | None:
        """Lock the subject whoever it belongs to now: the effect is made and must be written down."""
        if self._plain_unique_lookup():
            return fetch_one(self.subject_model, lock=True, extra=None, **{self._id_name(): preview.subject_id})
        return (
            self.subject_model._default_manager.select_for_update(of=("self",))
            .filter(**{self.subject_id_field: preview.subject_id})
            .first()
        )

    def _id_name(self) -> str:
        return self.subject_model._meta.pk.name if self.subject_id_field == "pk" else self.subject_id_field

    def _owner_name(self) -> str:
        """The owner's column (`customer_id`): the defaults look it up by the person's primary key."""
        return self.subject_model._meta.get_field(self.subject_owner_field).attname  # type: ignore[union-attr]  # a column

    def _plain_unique_lookup(self) -> bool:
        """Whether the subject is found by a unique field of its own table through a manager that filters
        nothing: then one row at most matches, and `.first()`'s ordering changes nothing."""
        if not self._plain_manager():
            return False
        field = self.subject_model._meta.get_field(self._id_name())
        return bool(getattr(field, "unique", False))

    def subject_version(self, subject: Model) -> int:
        return int(getattr(subject, self.subject_version_field))

    @abstractmethod
    def revalidate(self, *, preview: Preview, subject: Model) -> None:
        """Re-run the policy under lock before executing; raise PolicyRefusal to fail the preview."""
        ...

    #: Whether asking the outside world for the effect twice returns the first effect (a payment
    #: provider's idempotency key). If not (plain SMTP), the engine makes the effect while holding
    #: the preview's lock, so that two runs at once cannot both make it.
    idempotent_effect: bool = True
    #: Who makes the effect, in the words the engine's pages use for it ("the payment provider refused
    #: it for good", "we could not confirm the result with the mail server yet").
    effect_performer: ClassVar[str] = "the system carrying it out"

    def effect_reference(self, effect: dict[str, Any] | None) -> str:
        """How a person finds the effect outside ("reference re_123"), from what `perform` returned;
        this default reads its `reference`."""
        if effect and effect.get("reference"):
            return f"reference {effect['reference']}"
        return "no reference"

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

    def provider_evidence(self, preview: Preview) -> ProviderEvidence | None:
        """The outside world's references to this executed preview's effect and its events since (a
        refund's id at the payment provider and the provider's webhooks; the message id the mail server
        accepted), for the preview's evidence bundle; None (the default) when the action keeps none of
        its own: the bundle then holds the effect as the execution recorded it."""
        return None

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

    #: What the customer's history on the console's detail page calls this action's earlier previews
    #: ("refunds"); the history is shown only for an action that returns one from `customer_history`.
    history_noun: ClassVar[str] = "previews"

    def customer_history(self, preview: Preview) -> QuerySet[Preview] | None:
        """The same person's earlier previews of this action that took effect and still stand (across
        subjects), for the detail page's customer history: their count, total and list come from the
        engine. None (the default) shows no history."""
        return None

    def review_document(self, preview: Preview) -> ReviewDocument | None:
        """The document exactly as it will be sent, rendered now from the subject; None if none."""
        return None

    # Spending limits (approvals.core.limits).

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
        from approvals.core.errors import PolicyRefusal

        raise PolicyRefusal(f"A {self.name} preview cannot be changed by a reviewer.", code="counter_not_supported")

    def counter_words(self, preview: Preview, arguments: dict[str, Any]) -> str:
        """What the reviewer is about to propose, read back from the parsed `arguments` (the result of
        counter_arguments), for the confirmation step: "a refund of €4.50 instead of €10.00"."""
        changed = {name: value for name, value in arguments.items() if preview.payload.get(name) != value}
        return "; ".join(f"{name} {value}" for name, value in changed.items()) or "no change"
