"""The plug-in point: actions register here in their AppConfig.ready(); the engine never imports them.

An action says how to parse its arguments, how to check them against trusted data,
what a person must approve, and how to execute an approved preview.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
    from rest_framework.serializers import Serializer


from approvals.core.action import Action
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

__all__ = [
    "Action",
    "CounterField",
    "DisplayRow",
    "FactTable",
    "ImportSection",
    "Link",
    "Proposal",
    "ProviderEvidence",
    "Registry",
    "ReviewDocument",
    "RiskFlag",
    "RuleResult",
    "StaffRole",
    "StandingGrant",
    "registry",
]


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
