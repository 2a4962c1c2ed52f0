"""JSON read strictly, for everything a person or an agent sends (the agent API, MCP, the shop import):
duplicate keys, NaN and Infinity, and numbers that lose precision are refused rather than guessed at."""

import json
import math
import re
from typing import Any

MAX_JSON_DEPTH = 20


class StrictJSONError(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJSONError(f"Duplicate key {key[:40]!r} in a JSON object.")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise StrictJSONError(f"{name} is not a JSON number.")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 overflows to infinity: Infinity by another name
        raise StrictJSONError(f"The number {text[:40]} is out of range.")
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check(value: Any) -> None:
    """No nesting deeper than MAX_JSON_DEPTH; no lone surrogates (`"\\ud800"` parses, but is not text:
    it cannot be encoded, stored or sent back)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise StrictJSONError("A JSON string holds a lone surrogate (\\ud800-\\udfff); it is not text.")
        elif isinstance(item, dict | list):
            if level > MAX_JSON_DEPTH:
                raise StrictJSONError(f"JSON is nested deeper than {MAX_JSON_DEPTH} levels.")
            if isinstance(item, dict):
                stack.extend((key, level) for key in item)
                stack.extend((child, level + 1) for child in item.values())
            else:
                stack.extend((child, level + 1) for child in item)


def strict_json_loads(text: str) -> Any:
    """json.loads without the leniencies: duplicate keys, NaN/Infinity (also by overflow), absurd nesting,
    lone surrogates."""
    try:
        value = json.loads(
            text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants, parse_float=_finite_float
        )
    except StrictJSONError:
        raise
    except RecursionError as error:
        raise StrictJSONError("JSON is nested too deeply.") from error
    except ValueError as error:
        raise StrictJSONError(f"Not valid JSON: {error}") from error
    _check(value)
    return value


_DECODER = json.JSONDecoder()


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\n\r":
        position += 1
    return position


def member_text(text: str, *path: str) -> str | None:
    """The text of the value at `path` (object keys from the top) exactly as it stands in the JSON
    `text`, or None when there is none (or the text is not JSON). Nothing is validated here: the
    caller parses it strictly, and the audit keeps what was received rather than a re-serialisation."""
    try:
        return _member_text(text, 0, path)
    except (ValueError, IndexError, RecursionError):
        return None


def _member_text(text: str, position: int, path: tuple[str, ...]) -> str | None:
    position = _skip_space(text, position)
    if not path:
        _value, end = _DECODER.raw_decode(text, position)
        return text[position:end]
    if text[position] != "{":
        return None
    position += 1
    found: str | None = None
    while True:
        position = _skip_space(text, position)
        if text[position] == "}":
            return found
        if text[position] != '"':
            return None
        key, position = _DECODER.raw_decode(text, position)
        position = _skip_space(text, position)
        if text[position] != ":":
            return None
        position = _skip_space(text, position + 1)
        _value, end = _DECODER.raw_decode(text, position)
        if key == path[0]:
            # With duplicate keys the last one is what lenient parsers use: so is it here, and the
            # strict parse of the whole refuses the document anyway.
            found = _member_text(text, position, path[1:])
        position = _skip_space(text, end)
        if text[position] == ",":
            position += 1
        elif text[position] != "}":
            return None
