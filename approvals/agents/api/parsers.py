import json
import math
import re
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer

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


class StrictJSONParser(BaseParser):
    """The one parser of the API. Not a JSONParser subclass on purpose: DRF hands JSONParser
    subclasses `request.body`, which Django refuses past DATA_UPLOAD_MAX_MEMORY_SIZE with an HTML
    400 of its own; this parser reads the stream itself, at most one byte past the limit."""

    media_type = "application/json"
    renderer_class = JSONRenderer

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = stream.read(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1) if stream is not None else b""
        request = (parser_context or {}).get("request")
        if request is not None:
            # Kept so that a body that cannot be parsed is still audited as it was received.
            request.raw_body_text = raw[: settings.DATA_UPLOAD_MAX_MEMORY_SIZE].decode("utf-8", errors="replace")
        if len(raw) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise ParseError(f"The request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ParseError("The request body is not valid UTF-8.") from error
        try:
            return strict_json_loads(text)
        except StrictJSONError as error:
            raise ParseError(str(error)) from error
