"""The engine's public interface for actions: an action app imports this module and nothing else of
`approvals` (tests/test_boundaries.py fails otherwise). Everything else in `approvals/` is the engine's
own and may change without notice. docs/adding-an-action.md walks through a new action.

What is here, by what it is for:

**Declaring an action.** `Action` (subclass it, override its hooks), and what its hooks return:
`Proposal` (what the policy accepted: the payload a person approves; `amount_minor`/`currency` are
optional, None for an action that moves no money), `DisplayRow`, `RuleResult`, `FactTable`,
`CounterField`, `RiskFlag`, `ReviewDocument`, `StandingGrant`, `Link` (a page of the action's own:
`Action.customer_home` says where a customer sees their things, `Action.console_links` adds console
pages). Declarative hooks with defaults: `proposes_amount` (False unless the action declares money:
then its previews carry an amount, the quorum and the console's amount column apply to it),
`subject_changed_words` (the customer's explanation when the subject changed),
`searchable_payload_fields` (the console's search), `counts_toward_spending_limits`,
`idempotent_effect`, `can_look_up_effect`, `effect_performer` (who makes the effect, in the engine's
words: "the payment provider"), `effect_reference(effect)` (how people find it: "reference re_1") and
`provider_evidence(preview)` (the outside world's references and events for a preview's evidence
bundle, a `ProviderEvidence`; None by default), `customer_history(preview)` with `history_noun` (the
person's earlier previews that took effect, as a queryset: the console's detail page counts, totals
and lists them; None by default shows none).

**The subject.** The action names the row it acts on: `subject_model`, `subject_type`,
`subject_id_field` (the id people see), `subject_owner_field`, `subject_version_field`, and its refusal
`subject_unavailable_code` / `subject_unavailable_message`. The engine does the rest:
`proposal_subject(actor=, subject_id=)` looks it up among the actor's own in one query (raising the one
refusal for a foreign and a missing subject alike), `lock_subject` locks it before execution scoped the
same way (a subject that changed hands is refused as unavailable), `subject_version` reads its version.
`subject_queryset(actor)` says which subjects a person may act on (their own; invoices let billing staff
send any), `proposal_subject_queryset(actor)` the scope of a proposal's lookup alone, and
`proposal_subject_columns(subject_id)` the scalar subqueries a proposal reads with the subject in the same
statement (refunds read `amount_in_flight_column`). With the default scopes the lookup's SQL is built once
per process.

**Registering it.** In the app's `AppConfig.ready()`: `register_action(MyAction())`, and
`register_import_section(ImportSection(...))` for a top-level key of `import_shop_data`'s file
(which raises `ShopDataInvalid` for data it cannot store). `registry` is the registry itself (read it,
e.g. `registry.action("refund_order")`).

**Staff roles.** `StaffRole(group, permissions)`: the action declares the groups it needs in
`Action.staff_roles` and the permission deciding its previews in `Action.review_permission` (required;
declared in its own model's `Meta.permissions`). The engine creates the groups with their permissions
after every migrate: no data migration of the action's own. A role usually also holds
`EXPORT_AUDIT_PERMISSION` (the console's audit log).

**Errors an action raises.** `PolicyRefusal` (a proposal or re-check breaks a rule; give it a `code`
from the action's own `RefusalCode` enum), `ExecutionFailure` (execution refused for good; a
subclass may set `before_effect` or `effect_made`), `TransientExecutionError` (try again later),
`EffectLookupUnavailable` (an earlier attempt's effect cannot be looked up), `ApplicationError`
(the base: a business rule said no, in an action's own pages). An action says which of its failure
codes a staff retry may mend in `Action.retryable_failure_codes`.

**What an action reads of the engine's records.** `Preview` (with `PreviewStatus`, `OPEN_STATUSES`,
`ApprovalRole` for `Proposal.required_approvals`), `Execution` and `ExecutionOutcome`, `AuditEvent`.
Read them; only the engine changes them. `amount_in_flight(...)`: what approved previews on a subject
are paying right now (so two refunds cannot both take the remainder); `amount_in_flight_column(...)` is
the same as a scalar subquery to read with a proposal's subject, `amount_in_flight_expression(...)` as an
ORM expression to annotate the subjects of a query with.

**What an action may tell the engine.** `audit_record(...)` appends to the audit log (in the caller's
transaction). `preview_effect_changed(preview)` says the outside world changed an executed preview's
effect (a refund the bank failed afterwards), so the preview's pages and webhooks follow.
`proposal_admit(...)` proposes on a person's behalf (staff proposing again what the bank failed,
`origin=PreviewOrigin.STAFF_REPROPOSAL`), through the one admission path every preview takes: the
same policy, limits, quorum and confirmation as an agent's proposal, with its proposer recorded
(`PreviewOrigin.STAFF_PROPOSAL` for a refund staff propose from the console themselves).

**Helpers.** Money: `format_minor(amount_minor, currency)` for people, `parse_major(text, currency)`
from a form, `example_major(currency)` and `decimals_words(currency)` for its hint (`49.90`, `4990`),
`is_known_currency`, `amount_of(preview)` (the amount and currency of a preview that has one, typed as
present). `digest_of(value)` is the SHA-256 of a value's canonical JSON (what a
preview's digest is made of). Strict argument fields for `Action.arguments_serializer`:
`StrictSerializer`, `StrictIntegerField`, `StrictCharField`, `StrictChoiceField`, `SubjectIdField`,
`MAX_SAFE_MINOR`. Words someone else chose, in text a reviewer reads (a summary):
`customer_named(username)`, `agent_chose(text)` (quoted, on one line, said to be theirs). Views:
`AuthenticatedHttpRequest` (a request behind `login_required`).
Admin: `ReadOnlyModelAdmin`, `ReadOnlyInline` (an action's records are never edited in the admin).
Actions read and write their own rows with the plain ORM; the engine's hand-built statements are its own.
"""

from __future__ import annotations

from enum import StrEnum

from approvals.core.admin_bases import ReadOnlyInline, ReadOnlyModelAdmin
from approvals.core.arguments import (
    MAX_SAFE_MINOR,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictSerializer,
    SubjectIdField,
)
from approvals.core.digests import digest_of
from approvals.core.errors import (
    ApplicationError,
    EffectLookupUnavailable,
    ExecutionFailure,
    PolicyRefusal,
    TransientExecutionError,
)
from approvals.core.money import decimals_words, example_major, format_minor, is_known_currency, parse_major
from approvals.core.registry import (
    Action,
    CounterField,
    DisplayRow,
    FactTable,
    ImportSection,
    Link,
    Proposal,
    ProviderEvidence,
    ReviewDocument,
    RiskFlag,
    RuleResult,
    StaffRole,
    StandingGrant,
    registry,
)
from approvals.core.search_indexes import TrigramSearchIndex, payload_field_expression
from approvals.core.selectors import amount_in_flight, amount_in_flight_column, amount_in_flight_expression
from approvals.core.services import audit_record, proposal_admit
from approvals.core.transitions import preview_effect_changed
from approvals.core.types import AuthenticatedHttpRequest
from approvals.core.words import agent_chose, customer_named
from approvals.models import (
    OPEN_STATUSES,
    ApprovalRole,
    AuditEvent,
    Execution,
    ExecutionOutcome,
    Preview,
    PreviewOrigin,
    PreviewStatus,
)
from approvals.site.shop_import import ShopDataInvalid


def amount_of(preview: Preview) -> tuple[int, str]:
    """(amount_minor, currency) of a preview of an action that always proposes an amount (a refund);
    a preview's amount is optional, so this raises ValueError for one without."""
    if preview.amount_minor is None or not preview.currency:
        raise ValueError(f"Preview {preview.pk} ({preview.action}) has no amount.")
    return preview.amount_minor, preview.currency


class RefusalCode(StrEnum):
    """Base of an action's policy refusal codes: `class RefundRefusal(RefusalCode): ZERO_AMOUNT =
    "zero_amount"`, raised as `PolicyRefusal(message, code=RefundRefusal.ZERO_AMOUNT)`. The values are
    the stable codes agents and pages see."""


#: The engine's permission to export the audit records of the actions one decides (their
#: `review_permission`); a review role usually includes it. The whole log takes the auditor's
#: `approvals.audit_everything`.
EXPORT_AUDIT_PERMISSION = "approvals.export_auditrecord"

register_action = registry.register_action
register_import_section = registry.register_import_section

__all__ = [
    "TrigramSearchIndex",
    "payload_field_expression",
    "EXPORT_AUDIT_PERMISSION",
    "MAX_SAFE_MINOR",
    "OPEN_STATUSES",
    "Action",
    "AuthenticatedHttpRequest",
    "ApplicationError",
    "ApprovalRole",
    "AuditEvent",
    "CounterField",
    "DisplayRow",
    "EffectLookupUnavailable",
    "Execution",
    "ExecutionFailure",
    "ExecutionOutcome",
    "FactTable",
    "ImportSection",
    "Link",
    "PolicyRefusal",
    "Preview",
    "PreviewOrigin",
    "PreviewStatus",
    "Proposal",
    "ProviderEvidence",
    "ReadOnlyInline",
    "ReadOnlyModelAdmin",
    "RefusalCode",
    "ReviewDocument",
    "RiskFlag",
    "RuleResult",
    "ShopDataInvalid",
    "StaffRole",
    "StandingGrant",
    "StrictCharField",
    "StrictChoiceField",
    "StrictIntegerField",
    "StrictSerializer",
    "SubjectIdField",
    "TransientExecutionError",
    "agent_chose",
    "amount_in_flight",
    "amount_in_flight_column",
    "amount_in_flight_expression",
    "amount_of",
    "audit_record",
    "customer_named",
    "decimals_words",
    "digest_of",
    "example_major",
    "format_minor",
    "is_known_currency",
    "parse_major",
    "preview_effect_changed",
    "proposal_admit",
    "register_action",
    "register_import_section",
    "registry",
]
