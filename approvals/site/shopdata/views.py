"""The shop data API's views: they parse the headers and the body and call `shop_call`; nothing else."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.agents.api.errors import error_body
from approvals.agents.api.serializers import error_response
from approvals.core.errors import ErrorCode
from approvals.core.registry import ImportSection
from approvals.site.shopdata.authentication import (
    HasShopToken,
    ShopTokenAuthentication,
    ShopTokenThrottle,
    request_shop_token,
)
from approvals.site.shopdata.serializers import record_answer_serializer, record_request_serializer
from approvals.site.shopdata.services import ShopAnswer, ShopCall, shop_call

HEADERS = [
    OpenApiParameter(
        "WWW-Authenticate",
        {"type": "string", "enum": ['Bearer realm="shop"']},
        OpenApiParameter.HEADER,
        required=True,
        response=[401],
        description="The shop token scheme.",
    ),
    OpenApiParameter(
        "Retry-After",
        {"type": "integer", "minimum": 1},
        OpenApiParameter.HEADER,
        required=True,
        response=[429],
        description="Seconds until the next call is accepted.",
    ),
]
IF_MATCH = OpenApiParameter(
    "If-Match",
    {"type": "string", "minLength": 1, "maxLength": 100},
    OpenApiParameter.HEADER,
    required=False,
    description="Write only if the record is at this version (from a GET or an earlier answer); 409 otherwise.",
)
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "pattern": "^[!-~]{1,255}$", "minLength": 1, "maxLength": 255},
    OpenApiParameter.HEADER,
    required=False,
    description="Per token: the same key with the same request replays the first success; with another "
    "request it is a 409 idempotency_key_reused.",
)
UNAUTHORIZED = error_response("No, malformed, unknown or revoked shop token (with WWW-Authenticate).")
FORBIDDEN = error_response("The token lacks the scope (permission_denied, with needed_scope).")
THROTTLED = error_response("Too many calls with this token (with Retry-After).")


class ShopRecordView(APIView):
    authentication_classes = [ShopTokenAuthentication]
    permission_classes = [HasShopToken]
    throttle_classes = [ShopTokenThrottle]
    section_key = ""

    def get(self, request: Request, identity: str) -> Response:
        return _response(shop_call(ShopCall(request_shop_token(request), self.section_key, identity)))

    def put(self, request: Request, identity: str) -> Response:
        call = ShopCall(
            request_shop_token(request),
            self.section_key,
            identity,
            write=True,
            body=request.data,
            if_match=request.headers.get("If-Match"),
            idempotency_key=request.headers.get("Idempotency-Key"),
        )
        return _response(shop_call(call))


def _response(answer: ShopAnswer) -> Response:
    response = Response(answer.body, status=answer.status)
    if answer.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


def record_view(section: ImportSection) -> Any:
    """The view of one served import section, with its schema (its item serializer is the body)."""
    answer = record_answer_serializer(section)
    name = section.key.rstrip("s")
    identity = OpenApiParameter(
        "identity",
        OpenApiTypes.STR,
        OpenApiParameter.PATH,
        description=f"The {name}'s `{section.key_field}` as in the import file.",
    )
    common = {
        401: UNAUTHORIZED,
        403: FORBIDDEN,
        429: THROTTLED,
    }

    # Fresh functions: extend_schema annotates the function it is given, and each section has its own.
    def get(self: ShopRecordView, request: Request, identity: str) -> Response:
        return ShopRecordView.get(self, request, identity)

    def put(self: ShopRecordView, request: Request, identity: str) -> Response:
        return ShopRecordView.put(self, request, identity)

    get = extend_schema(
        operation_id=f"shop_{name}_get",
        tags=["shop data"],
        summary=f"Read one {name} in the import format, with its version",
        parameters=[identity, *HEADERS],
        responses={
            200: OpenApiResponse(answer, description="The record and its version."),
            404: error_response("No such record."),
            409: error_response("The username is a staff member's (staff_account)."),
            **common,
        },
    )(get)
    put = extend_schema(
        operation_id=f"shop_{name}_put",
        tags=["shop data"],
        summary=f"Create or update one {name} from its import record",
        request=record_request_serializer(section),
        parameters=[identity, IF_MATCH, IDEMPOTENCY_KEY, *HEADERS],
        responses={
            200: OpenApiResponse(answer, description="Updated or unchanged: the record and its version."),
            201: OpenApiResponse(answer, description="Created: the record and its version."),
            400: error_response(
                "Not a valid record (invalid_record: `problems` lists each as `<JSON path>: <message>`, the "
                "import's messages), malformed JSON, or a bad Idempotency-Key."
            ),
            404: error_response("No such endpoint."),
            409: error_response(
                "If-Match names another version (version_mismatch, with current_version), the "
                "Idempotency-Key was used for another request (idempotency_key_reused), or the username "
                "is a staff member's (staff_account)."
            ),
            415: error_response("The body is not JSON."),
            **common,
        },
    )(put)
    view: type[ShopRecordView] = type(
        f"Shop{name.title()}RecordView", (ShopRecordView,), {"section_key": section.key, "get": get, "put": put}
    )
    return view.as_view()


def no_such_endpoint(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Anything else under /api/shop/: the JSON envelope, not an HTML page."""
    return JsonResponse(
        error_body(ErrorCode.NOT_FOUND, "There is no such endpoint; the shop data API is described at /api/schema/."),
        status=404,
    )
