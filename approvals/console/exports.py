"""Streaming encodings of the audit log: CSV for spreadsheets, JSON lines for exact values."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from approvals.console.selectors import AUDIT_EXPORT_FIELDS

# A spreadsheet runs a cell starting with one of these as a formula; agent-supplied text
# (the raw arguments) must never become one. JSON lines keep the exact values.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
# A spreadsheet that splits on `;` or `,` (the locale's separator, or "text to columns") makes the text
# after one a cell of its own: a formula character there (after optional spaces) is defused too.
FORMULA_AFTER_SEPARATOR = re.compile(r"[;,][ ]*[=+\-@\t\r]")


class _Echo:
    """A file-like object whose write() returns the line, so csv.writer can feed a stream."""

    def write(self, value: str) -> str:
        return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = str(value)
    # OWASP's advice: prefix the cell with an apostrophe, and quote every cell.
    return "'" + text if text.startswith(FORMULA_PREFIXES) or FORMULA_AFTER_SEPARATOR.search(text) else text


def audit_csv(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    writer = csv.writer(_Echo(), quoting=csv.QUOTE_ALL)
    yield writer.writerow(AUDIT_EXPORT_FIELDS)
    for row in rows:
        yield writer.writerow([_cell(row[name]) for name in AUDIT_EXPORT_FIELDS])


def audit_jsonl(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        yield json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"
