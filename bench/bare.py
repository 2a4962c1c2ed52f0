"""The bare floor: what the framework stack itself costs. A DRF view behind CommonMiddleware alone
(bench/bare_settings.py), with the token and the order looked up in raw SQL and one INSERT: no
authentication class, no session or CSRF middleware, no throttle, no policy, no preview, no audit.
`make bench` serves it from a second gunicorn with the same configuration and reports the pipeline
against it as well as against the project floor (bench/floor.py)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import connection
from rest_framework.parsers import JSONParser
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

SESSION_SQL = (
    "SELECT id, user_id FROM approvals_agentsession WHERE token_hash = %s AND revoked_at IS NULL AND expires_at > now()"
)
ORDER_SQL = "SELECT id, total_minor - refunded_minor FROM refunds_order WHERE number = %s AND customer_id = %s"
INSERT_SQL = (
    "INSERT INTO bench_floorcall (agent_session_id, tool_name, arguments, created_at) "
    "VALUES (%s, %s, %s::jsonb, now()) RETURNING id"
)


def _error(status: int, code: str) -> Response:
    return Response({"ok": False, "executed": False, "error": {"code": code}}, status=status)


class BareToolCallView(APIView):
    authentication_classes = ()
    permission_classes = (AllowAny,)
    throttle_classes = ()
    parser_classes = (JSONParser,)
    renderer_classes = (JSONRenderer,)

    def post(self, request: Request) -> Response:
        token = request.META.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ").strip()
        data: Any = request.data
        arguments = data.get("arguments") if isinstance(data, dict) else None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return _error(400, "invalid_arguments")
        if not isinstance(arguments, dict):
            return _error(400, "invalid_arguments")
        with connection.cursor() as cursor:
            cursor.execute(SESSION_SQL, [hashlib.sha256(token.encode()).hexdigest()])
            session = cursor.fetchone()
            if session is None:
                return _error(401, "not_authenticated")
            cursor.execute(ORDER_SQL, [str(arguments.get("order_id", "")), session[1]])
            order = cursor.fetchone()
            cursor.execute(INSERT_SQL, [session[0], str(data.get("name", ""))[:64], json.dumps(arguments)])
            row_id = cursor.fetchone()[0]
        return Response(
            {"ok": True, "executed": False, "status": "recorded", "id": row_id, "order_found": order is not None},
            status=201,
        )
