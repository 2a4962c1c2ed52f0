"""One exception handler: every API error has the contract's envelope."""

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from approvals.core.errors import ApplicationError, ErrorCode


def error_body(code: str, message: str, **facts: Any) -> dict[str, Any]:
    return {"ok": False, "executed": False, "error": {"code": code, "message": message, **facts}}


def _message(detail: Any) -> str:
    if isinstance(detail, list | tuple) and detail:
        return _message(detail[0])
    if isinstance(detail, dict) and detail:
        return _message(next(iter(detail.values())))
    return str(detail)


CODES = {
    exceptions.NotAuthenticated: ErrorCode.NOT_AUTHENTICATED,
    exceptions.AuthenticationFailed: ErrorCode.AUTHENTICATION_FAILED,
    exceptions.PermissionDenied: ErrorCode.PERMISSION_DENIED,
    exceptions.NotFound: ErrorCode.NOT_FOUND,
    exceptions.MethodNotAllowed: ErrorCode.METHOD_NOT_ALLOWED,
    exceptions.NotAcceptable: ErrorCode.NOT_ACCEPTABLE,
    exceptions.UnsupportedMediaType: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    exceptions.ParseError: ErrorCode.MALFORMED_REQUEST,
    exceptions.Throttled: ErrorCode.THROTTLED,
    exceptions.ValidationError: ErrorCode.INVALID_REQUEST,
}


def error_code(exc: Exception) -> str:
    return next((c for klass, c in CODES.items() if isinstance(exc, klass)), ErrorCode.ERROR)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        return Response(error_body(**exc.as_dict()), status=status.HTTP_400_BAD_REQUEST)
    # DRF answers these Django exceptions too; map them first so the envelope has a real code and message.
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args)
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    response = exception_handler(exc, context)
    if response is None:
        return None
    code = error_code(exc)
    facts: dict[str, Any] = {}
    if isinstance(exc, exceptions.ValidationError):
        facts["fields"] = exc.detail
    wait = getattr(exc, "wait", None) if isinstance(exc, exceptions.Throttled) else None  # set by its __init__
    if wait is not None:
        facts["retry_after_seconds"] = max(int(wait), 1)  # DRF rounded it up; the same as Retry-After
    detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
    message = _message(detail)
    if isinstance(exc, exceptions.UnsupportedMediaType):
        request = context.get("request")
        sent = getattr(request, "content_type", "") if request is not None else ""
        said = f"The body was sent as {sent!r}" if sent else "The request has no Content-Type header"
        message = f"{said}: send it as JSON with `Content-Type: application/json`."
    response.data = error_body(code, message, **facts)
    return response
