"""The audit log served as a c2sp.org/tlog-tiles log under /audit/: the checkpoint, the hash tiles
(public) and the entry bundles (the records: personal data, behind AUDIT_READ_TOKEN)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.gzip import gzip_page
from django.views.decorators.http import require_safe

from approvals.audit import tlog
from approvals.audit.seal import checkpoint_note, latest_head, latest_published_head
from approvals.audit.tiles import entry_bundle_bytes, tile_bytes

IMMUTABLE = "max-age=31536000, immutable"


@require_safe
def checkpoint(request: HttpRequest) -> HttpResponse:
    """The latest published checkpoint, with the witnesses' cosignatures; 404 before the first seal."""
    head = latest_published_head()
    if head is None or not head.note:
        raise Http404("No checkpoint yet.")
    response = HttpResponse(checkpoint_note(head), content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "public, max-age=2"
    return response


def _tile_place(path: str) -> tuple[str, int, int]:
    try:
        return tlog.tile_path_parse(path)
    except tlog.FormatError:
        raise Http404("Not a tile of this log.") from None


@require_safe
def tile(request: HttpRequest, path: str) -> HttpResponse:
    level, index, width = _tile_place(path)
    head = latest_head()
    if level == "entries" or head is None:
        raise Http404("Not a tile of this log.")
    data = tile_bytes(int(level), index, width, head.size)
    if data is None:
        raise Http404("Not a tile of this log.")
    response = HttpResponse(data, content_type="application/octet-stream")
    response["Cache-Control"] = f"public, {IMMUTABLE}"
    return response


def _read_token_valid(request: HttpRequest) -> bool:
    expected = settings.AUDIT_READ_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return bool(expected) and scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), expected)


@require_safe
@gzip_page
def entries(request: HttpRequest, path: str) -> HttpResponse:
    if not _read_token_valid(request):
        response = HttpResponse(
            "Entry bundles hold the audit records: send Authorization: Bearer <AUDIT_READ_TOKEN>.\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="audit log entries"'
        return response
    _entries, index, width = _tile_place(f"entries/{path}")
    head = latest_head()
    data = entry_bundle_bytes(index, width, head.size) if head is not None else None
    if data is None:
        raise Http404("Not an entry bundle of this log.")
    response = HttpResponse(data, content_type="application/octet-stream")
    response["Cache-Control"] = f"private, {IMMUTABLE}"
    return response
