import json
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

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


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def strict_json_loads(text: str) -> Any:
    """json.loads without the leniencies: duplicate keys, NaN/Infinity, absurd nesting."""
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    except StrictJSONError:
        raise
    except RecursionError as error:
        raise StrictJSONError("JSON is nested too deeply.") from error
    except ValueError as error:
        raise StrictJSONError(f"Not valid JSON: {error}") from error
    if _depth(value) > MAX_JSON_DEPTH:
        raise StrictJSONError(f"JSON is nested deeper than {MAX_JSON_DEPTH} levels.")
    return value


class StrictJSONParser(JSONParser):
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
