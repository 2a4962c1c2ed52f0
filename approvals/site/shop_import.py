"""`import_shop_data`: validate the whole file first, then upsert it in one transaction."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db import transaction

from approvals.core.errors import ApplicationError
from approvals.core.registry import ImportSection, registry
from approvals.core.services import audit_record
from approvals.core.strict_json import StrictJSONError, strict_json_loads
from approvals.models import AuditEvent


class ShopDataInvalid(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class ShopRecordRefused(ApplicationError):
    """A section's `record` hook will not serve this item through the shop data API (a username that
    is a staff member's: staff are kept by the import only)."""

    code = "record_not_served"


def _flatten(errors: Any, path: str) -> list[str]:
    if isinstance(errors, dict):
        out: list[str] = []
        for key, value in errors.items():
            if key == "non_field_errors":
                out.extend(_flatten(value, path))
            elif isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
                out.extend(_flatten(value, f"{path}[{key}]"))
            else:
                out.extend(_flatten(value, f"{path}.{key}"))
        return out
    if isinstance(errors, list):
        if errors and all(isinstance(e, dict | list) for e in errors):
            out = []
            for index, value in enumerate(errors):
                if value:
                    out.extend(_flatten(value, f"{path}[{index}]"))
            return out
        return [f"{path}: {message}" for message in errors]
    return [f"{path}: {errors}"]


def _identity(item: Any) -> Any:
    if isinstance(item, dict):
        return item.get("id") or item.get("number") or item.get("username")
    return None


def shop_data_validate(text: str) -> list[tuple[Any, list[dict[str, Any]]]]:
    """Parse and validate every section; raise ShopDataInvalid listing each problem by JSON path."""
    try:
        document = strict_json_loads(text)
    except StrictJSONError as error:
        raise ShopDataInvalid([f"$: {error}"]) from error
    if not isinstance(document, dict):
        raise ShopDataInvalid(["$: the file must hold a JSON object"])
    sections = registry.import_sections
    problems = [
        f"$.{key}: unknown key (expected one of {', '.join(sorted(sections))})"
        for key in document
        if key not in sections
    ]
    people = [p for key in ("customers", "staff") for p in document.get(key) or [] if isinstance(p, dict)]
    context = {
        "document": document,
        "usernames": {p.get("username") for p in people},
        "staff": {p.get("username") for p in document.get("staff") or [] if isinstance(p, dict)},
        # The groups each staff member in the file will have after the import.
        "staff_groups": {
            p.get("username"): [g for g in p.get("groups") or [] if isinstance(g, str)]
            for p in document.get("staff") or []
            if isinstance(p, dict)
        },
    }
    validated: list[tuple[Any, list[dict[str, Any]]]] = []
    for section in registry.ordered_import_sections():
        items = document.get(section.key, [])
        if not isinstance(items, list):
            problems.append(f"$.{section.key}: must be a list")
            continue
        duplicates = [k for k, n in Counter(_identity(i) for i in items).items() if k is not None and n > 1]
        problems.extend(f"$.{section.key}: {key!r} appears more than once" for key in duplicates)
        serializer = section.item_serializer(data=items, many=True, context=context)
        if serializer.is_valid():
            validated.append((section, serializer.validated_data))
        else:
            problems.extend(_flatten(serializer.errors, f"$.{section.key}"))
    if problems:
        raise ShopDataInvalid(problems)
    return validated


def _public(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if summary is None else {k: v for k, v in summary.items() if not k.startswith("_")}


def _changed_fields(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[str]:
    before, after = before or {}, after or {}
    return sorted(k.lstrip("_") for k in set(before) | set(after) if before.get(k) != after.get(k))


def shop_item_write(
    section: ImportSection,
    item: dict[str, Any],
    *,
    operator: str,
    source: str = "import_shop_data",
    facts: dict[str, Any] | None = None,
) -> str:
    """Write one validated item through its section, auditing a change with its before/after summary,
    the operator and the source (the import, or the shop data API with its token's `facts`)."""
    if section.describe is None:
        return section.write(dict(item))
    _, before = section.describe(item)
    outcome = section.write(dict(item))
    if outcome == "unchanged":
        return outcome
    subject_id, after = section.describe(item)
    audit_record(
        event=AuditEvent(section.audit_event),
        subject_type=section.subject_type,
        subject_id=subject_id,
        result={
            "source": source,
            "operator": operator,
            **(facts or {}),
            "section": section.key,
            "outcome": outcome,
            "changed": _changed_fields(before, after),
            "before": _public(before),
            "after": _public(after),
        },
    )
    return outcome


def shop_data_import(text: str, *, operator: str) -> dict[str, Counter[str]]:
    """Validate, then write everything or nothing. Returns outcome counts per section.

    Every change is audited with a before/after summary and the operator who ran the import.
    """
    if not operator.strip():
        raise ValueError("An import needs the name of its operator.")
    validated = shop_data_validate(text)
    summary: dict[str, Counter[str]] = {}
    with transaction.atomic():
        for section, items in validated:
            summary[section.key] = Counter(shop_item_write(section, item, operator=operator) for item in items)
    return summary
