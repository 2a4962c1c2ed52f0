from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer

from approvals.core.strict_json import StrictJSONError, strict_json_loads


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
