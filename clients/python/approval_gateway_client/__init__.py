"""A small client for the approval gateway's agent API: list tools, propose, withdraw, wait for the outcome, verify
webhooks. `GatewayClient` (httpx.Client) and `AsyncGatewayClient` (httpx.AsyncClient) have the same methods.

Every call is a proposal: an answer with `ok` true means a preview exists, not that anything happened.
Only `executed` (and the `outcome`) say what the executor did.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = [
    "Answer",
    "AsyncGatewayClient",
    "GatewayClient",
    "GatewayError",
    "WebhookVerificationError",
    "FINAL_STATUSES",
    "TOOL_RESULT_STATUSES",
    "verify_webhook",
]

# A preview in one of these states changes no more.
FINAL_STATUSES = frozenset({"executed", "declined", "rejected", "expired", "superseded", "failed", "withdrawn"})
# When the server declines to hold a long-poll (Preview-Wait-Declined: too many waits of this session or
# of its process), wait_for_outcome pauses this long before asking again instead of asking at once.
DECLINED_WAIT_PAUSE_SECONDS = 2.0
WEBHOOK_TOLERANCE_SECONDS = 5 * 60
# Answers about the call itself that the model can act on (malformed arguments, a tool it may not use, no
# such tool or preview, a reused key or a decided preview, a policy refusal): `propose`, `preview` and
# `withdraw` return them as an Answer with `ok` false, to be handed back to the model. 401, 429, 5xx and
# transport errors still raise: they are the deployment's to handle, and a model cannot mend them.
TOOL_RESULT_STATUSES = frozenset({400, 403, 404, 409, 422})


class GatewayError(Exception):
    """The gateway refused the request itself: a bad or revoked token (401), throttling (429), a server error,
    or, for `tools` and `previews`, any other error; `propose`, `preview` and `withdraw` return the model's
    own mistakes instead (TOOL_RESULT_STATUSES)."""

    def __init__(self, status_code: int, body: Any) -> None:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        super().__init__(f"{status_code} {error.get('code', '')}: {error.get('message', body)}")
        self.status_code = status_code
        self.code = error.get("code", "")
        self.body = body


@dataclass(frozen=True)
class Answer:
    """A proposal's or a preview's answer, with the fields an agent reports from."""

    status_code: int
    body: dict[str, Any] = field(repr=False)
    # `session` or `process` when a long-poll was answered at once instead of held (Preview-Wait-Declined).
    wait_declined: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.body.get("ok"))

    @property
    def executed(self) -> bool:
        return bool(self.body.get("executed"))

    @property
    def status(self) -> str | None:
        return self.body.get("status")

    @property
    def outcome(self) -> str | None:
        return self.body.get("outcome")

    @property
    def message(self) -> str:
        if self.ok:
            return self.body.get("message", "")
        return self.body.get("error", {}).get("message", "")

    @property
    def code(self) -> str | None:
        """The refusal's code (e.g. amount_exceeds_remaining), None for a preview."""
        return None if self.ok else self.body.get("error", {}).get("code")

    @property
    def preview(self) -> dict[str, Any] | None:
        return self.body.get("preview")

    @property
    def preview_id(self) -> str | None:
        return self.preview["id"] if self.preview else None

    @property
    def confirm_url(self) -> str | None:
        return self.preview.get("confirm_url") if self.preview else None

    @property
    def call_id(self) -> str | None:
        return self.body.get("call_id")

    @property
    def other_open_previews(self) -> list[str]:
        """A proposal's answer: this session's other open previews on the same subject. Once one of them (or
        this one) is executed, the rest are superseded; `withdraw` those no longer wanted."""
        return list(self.body.get("other_open_previews", []))

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES


class _Calls:
    """What the two clients share: each call's request, and how its answer is read. The clients only send."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    def _request_arguments(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        headers = {**self._headers, **kwargs.pop("headers", {})}
        return {"method": method, "url": f"{self.base_url}{path}", "headers": headers, **kwargs}

    @staticmethod
    def _json(response: httpx.Response, *, returned: frozenset[int] = frozenset()) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = {"error": {"code": "not_json", "message": response.text[:200]}}
        if response.status_code >= 400 and response.status_code not in returned:
            raise GatewayError(response.status_code, body)
        return body

    @classmethod
    def _answer(cls, response: httpx.Response) -> Answer:
        body = cls._json(response, returned=TOOL_RESULT_STATUSES)
        return Answer(response.status_code, body, response.headers.get("Preview-Wait-Declined"))

    def _tools(self, format: str | None) -> dict[str, Any]:  # noqa: A002 - the query parameter's name
        params = {"format": format} if format else None
        return self._request_arguments("GET", "/api/agent/tools", params=params)

    def _propose(
        self, name: str, arguments: dict[str, Any] | str, call_id: str | None, idempotency_key: str | None
    ) -> dict[str, Any]:
        envelope: dict[str, Any] = {"name": name, "arguments": arguments}
        if call_id is not None:
            envelope["call_id"] = call_id
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._request_arguments("POST", "/api/agent/tool-calls", json=envelope, headers=headers)

    def _preview(self, preview_id: str, wait: int | None) -> dict[str, Any]:
        params = {"wait": str(wait)} if wait else None
        return self._request_arguments(
            "GET", f"/api/agent/previews/{preview_id}", params=params, timeout=(wait or 0) + 30
        )

    def _withdraw(self, preview_id: str) -> dict[str, Any]:
        return self._request_arguments("POST", f"/api/agent/previews/{preview_id}/withdraw")

    def _previews(self, status: str | list[str] | None, page: int) -> dict[str, Any]:
        params: dict[str, str] = {"page": str(page)}
        if status:
            params["status"] = status if isinstance(status, str) else ",".join(status)
        return self._request_arguments("GET", "/api/agent/previews", params=params)


class GatewayClient(_Calls):
    """The agent API for one agent session (its bearer token decides who acts). AsyncGatewayClient is the
    same for asyncio."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0, http: httpx.Client | None = None) -> None:
        super().__init__(base_url, token)
        self._http = http or httpx.Client(timeout=timeout)
        self._owns_http = http is None

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def _send(self, request: dict[str, Any]) -> httpx.Response:
        return self._http.request(**request)

    def tools(self, format: str | None = None) -> Any:  # noqa: A002 - the query parameter's name
        """This session's tools: the contract's shape, or `openai`, `openai-responses`, `anthropic`, `mcp`,
        `gemini`."""
        return self._json(self._send(self._tools(format)))

    def propose(
        self,
        name: str,
        arguments: dict[str, Any] | str,
        *,
        call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Answer:
        """POST a tool call. A refusal the model can act on (400, 403, 404, 409, 422) is an Answer with `ok`
        false, `code` and `message`: give its `body` back to the model as the tool's result."""
        return self._answer(self._send(self._propose(name, arguments, call_id, idempotency_key)))

    def preview(self, preview_id: str, *, wait: int | None = None) -> Answer:
        """The preview as it is now; with `wait`, as soon as it changes (the server caps the wait). An id the
        session cannot see is an Answer with `ok` false (404), as for `propose`."""
        return self._answer(self._send(self._preview(preview_id, wait)))

    def withdraw(self, preview_id: str) -> Answer:
        """Take back this session's own proposal while it waits for a decision: an Answer with status
        `withdrawn`. One that no longer waits (approved, executed, declined, …) is an Answer with `ok` false
        (409, `not_awaiting_decision`, its `status`); an id of no preview of this session, a 404 Answer."""
        return self._answer(self._send(self._withdraw(preview_id)))

    def previews(self, *, status: str | list[str] | None = None, page: int = 1) -> dict[str, Any]:
        """One page of this session's previews, newest first (`results`, `next`)."""
        return self._json(self._send(self._previews(status, page)))

    def wait_for_outcome(
        self,
        preview_id: str,
        *,
        timeout: float = 600,
        until: frozenset[str] = FINAL_STATUSES,
        wait: int = 30,
    ) -> Answer:
        """Long-poll the preview until its status is one of `until` (by default, final) or `timeout` passes;
        returns the last answer either way, or at once a refusal (an id this session cannot see)."""
        deadline = time.monotonic() + timeout
        answer = self.preview(preview_id)
        while answer.status not in until and answer.status_code < 400:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            answer = self.preview(preview_id, wait=max(1, min(wait, int(left))))
            if answer.wait_declined and answer.status not in until:
                time.sleep(min(DECLINED_WAIT_PAUSE_SECONDS, max(0.0, deadline - time.monotonic())))
        return answer


class AsyncGatewayClient(_Calls):
    """GatewayClient for asyncio (`httpx.AsyncClient`): the same methods, awaited, and the same answers (a
    refusal the model can act on is returned, not raised)."""

    def __init__(
        self, base_url: str, token: str, *, timeout: float = 30.0, http: httpx.AsyncClient | None = None
    ) -> None:
        super().__init__(base_url, token)
        self._http = http or httpx.AsyncClient(timeout=timeout)
        self._owns_http = http is None

    async def __aenter__(self) -> AsyncGatewayClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def _send(self, request: dict[str, Any]) -> httpx.Response:
        return await self._http.request(**request)

    async def tools(self, format: str | None = None) -> Any:  # noqa: A002 - the query parameter's name
        """GatewayClient.tools."""
        return self._json(await self._send(self._tools(format)))

    async def propose(
        self,
        name: str,
        arguments: dict[str, Any] | str,
        *,
        call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Answer:
        """GatewayClient.propose: a refusal the model can act on is an Answer with `ok` false."""
        return self._answer(await self._send(self._propose(name, arguments, call_id, idempotency_key)))

    async def preview(self, preview_id: str, *, wait: int | None = None) -> Answer:
        """GatewayClient.preview."""
        return self._answer(await self._send(self._preview(preview_id, wait)))

    async def withdraw(self, preview_id: str) -> Answer:
        """GatewayClient.withdraw."""
        return self._answer(await self._send(self._withdraw(preview_id)))

    async def previews(self, *, status: str | list[str] | None = None, page: int = 1) -> dict[str, Any]:
        """GatewayClient.previews."""
        return self._json(await self._send(self._previews(status, page)))

    async def wait_for_outcome(
        self,
        preview_id: str,
        *,
        timeout: float = 600,
        until: frozenset[str] = FINAL_STATUSES,
        wait: int = 30,
    ) -> Answer:
        """GatewayClient.wait_for_outcome, without blocking the event loop."""
        deadline = time.monotonic() + timeout
        answer = await self.preview(preview_id)
        while answer.status not in until and answer.status_code < 400:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            answer = await self.preview(preview_id, wait=max(1, min(wait, int(left))))
            if answer.wait_declined and answer.status not in until:
                await asyncio.sleep(min(DECLINED_WAIT_PAUSE_SECONDS, max(0.0, deadline - time.monotonic())))
        return answer


class WebhookVerificationError(Exception):
    pass


def _header(headers: Any, name: str) -> str:
    for key, value in dict(headers).items():
        if key.lower() == name:
            return value
    raise WebhookVerificationError(f"Missing header {name}")


def verify_webhook(
    secret: str,
    body: bytes | str,
    headers: Any,
    *,
    tolerance_seconds: int = WEBHOOK_TOLERANCE_SECONDS,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a Standard Webhooks message (webhook-id, webhook-timestamp, webhook-signature) against the
    session's `whsec_…` secret; returns the parsed body, or raises WebhookVerificationError."""
    payload = body.decode("utf-8") if isinstance(body, bytes) else body
    message_id = _header(headers, "webhook-id")
    timestamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    try:
        sent_at = int(timestamp)
    except ValueError as error:
        raise WebhookVerificationError("Malformed webhook-timestamp") from error
    if abs((now if now is not None else time.time()) - sent_at) > tolerance_seconds:
        raise WebhookVerificationError("The message's timestamp is too old or in the future")
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(
        hmac.new(key, f"{message_id}.{sent_at}.{payload}".encode(), hashlib.sha256).digest()
    ).decode()
    for candidate in signatures.split():
        version, _, signature = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(signature, expected):
            return json.loads(payload)
    raise WebhookVerificationError("No matching signature")
