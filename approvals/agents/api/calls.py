"""One tool call, from its name and arguments to the answer: the path the REST API and the MCP server share.

Whatever the transport, a call is parsed by the action's own serializer, refused before the policy with
the same codes (`unknown_tool`, `tool_not_allowed`, `invalid_arguments`, `idempotency_key_reused`), and
proposed through `proposal_submit` (the same policy, preview and audit); with a key it is answered once
and replayed after. The transports only differ in how they carry the answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rest_framework import status

from approvals.agents.api.errors import error_body
from approvals.agents.api.formats import WITHDRAW_TOOL
from approvals.agents.rejected_calls import rejected_call_audit_due, rejected_call_count
from approvals.core.digests import digest_of
from approvals.core.errors import DecisionError, ErrorCode
from approvals.core.presentation import preview_envelope
from approvals.core.registry import Action, registry
from approvals.core.selectors import session_open_siblings
from approvals.core.services import (
    IdempotencyConflict,
    idempotent_call,
    preview_refresh,
    preview_withdraw,
    proposal_audit_rejected,
    proposal_submit,
)
from approvals.core.strict_json import StrictJSONError, strict_json_loads
from approvals.models import AgentSession, AuditEvent, Preview, RejectedCallKind

WITHDRAW_PATH = "POST /api/agent/previews/<id>/withdraw"

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


def storable(value: Any) -> Any:
    """PostgreSQL text and jsonb cannot hold U+0000. What the audit keeps of a hostile call has it as
    U+FFFD instead, as for bytes that were not UTF-8; everything else stays exactly as received."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


def raw_arguments_text(arguments: Any) -> str:
    """The arguments as the audit keeps them: a string as received, an object as JSON."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return json.dumps(arguments, ensure_ascii=False)


def audit_rejected_call(
    *,
    session: AgentSession,
    event: AuditEvent,
    tool_name: str,
    raw_arguments: str,
    error: dict[str, Any],
    call_id: str | None = None,
) -> None:
    """Count a call refused before the policy; audit it in full only while few came this minute."""
    count = rejected_call_count(
        agent_session=session, kind=RejectedCallKind.MALFORMED, body=raw_arguments, code=str(error.get("code", ""))
    )
    if rejected_call_audit_due(count):
        proposal_audit_rejected(
            agent_session=session,
            event=event,
            tool_name=tool_name,
            raw_arguments=raw_arguments,
            error=error,
            call_id=call_id,
        )


@dataclass(frozen=True)
class CallAnswer:
    """The HTTP status the REST API answers with, its body, and whether it replays an earlier answer."""

    http_status: int
    body: dict[str, Any]
    replayed: bool = False

    @property
    def refused(self) -> bool:
        return not self.body.get("ok", False)

    @property
    def preview_id(self) -> str | None:
        preview = self.body.get("preview")
        return preview.get("id") if isinstance(preview, dict) else None


@dataclass(frozen=True)
class _Call:
    """One call as received, for its answers and its audit."""

    session: AgentSession
    tool_name: str
    raw_arguments: str
    call_id: str | None

    def reject(self, http_status: int, event: AuditEvent, code: str, message: str, **facts: Any) -> CallAnswer:
        """Refused before the policy: the error envelope (with `call_id` echoed), audited."""
        body = storable(error_body(code, message, **facts))
        audit_rejected_call(
            session=self.session,
            event=event,
            tool_name=storable(self.tool_name),
            raw_arguments=storable(self.raw_arguments),
            error=body["error"],
            call_id=storable(self.call_id),
        )
        if self.call_id is not None:
            body["call_id"] = self.call_id
        return CallAnswer(http_status, body)


def envelope_invalid(*, session: AgentSession, data: Any, errors: Any) -> CallAnswer:
    """A 400 for a tool call envelope that did not parse, audited with the name and arguments it carried."""
    tool_name = data.get("name") if isinstance(data, dict) else None
    tool_name = tool_name if isinstance(tool_name, str) else ""
    body = storable(error_body(ErrorCode.INVALID_REQUEST, "The tool call envelope is malformed.", fields=errors))
    audit_rejected_call(
        session=session,
        event=AuditEvent.PROPOSAL_INVALID,
        tool_name=storable(tool_name),
        raw_arguments=storable(raw_arguments_text(data.get("arguments") if isinstance(data, dict) else None)),
        error=body["error"],
    )
    return CallAnswer(status.HTTP_400_BAD_REQUEST, body)


def body_unparsable(*, session: AgentSession, raw_body: str, code: str, message: str) -> None:
    """Not even JSON: still a tool call from this session, audited with the body as received and the
    error code the caller gets (malformed_request, unsupported_media_type)."""
    audit_rejected_call(
        session=session,
        event=AuditEvent.PROPOSAL_INVALID,
        tool_name="",
        raw_arguments=storable(raw_body),
        error=storable({"code": code, "message": message}),
    )


def _action_or_refusal(call: _Call) -> tuple[Action | None, CallAnswer | None]:
    action = registry.action(call.tool_name)
    if action is None:
        refusal = call.reject(
            404, AuditEvent.PROPOSAL_INVALID, ErrorCode.UNKNOWN_TOOL, f"There is no tool named {call.tool_name!r}."
        )
        return None, refusal
    if call.tool_name not in call.session.tools:
        refusal = call.reject(
            403,
            AuditEvent.PROPOSAL_FORBIDDEN,
            ErrorCode.TOOL_NOT_ALLOWED,
            f"This agent session may not use the tool {call.tool_name!r}.",
        )
        return None, refusal
    return action, None


def _arguments_or_refusal(
    call: _Call, action: Action, arguments: Any
) -> tuple[Any, dict[str, Any] | None, CallAnswer | None]:
    """The arguments as sent (a string parsed strictly), and as the action's serializer validated them."""
    invalid = AuditEvent.PROPOSAL_INVALID, ErrorCode.INVALID_ARGUMENTS
    if isinstance(arguments, str):
        try:
            arguments = strict_json_loads(arguments)
        except StrictJSONError as error:
            return arguments, None, call.reject(400, *invalid, f"The arguments string is not valid JSON: {error}")
    if not isinstance(arguments, dict):
        return arguments, None, call.reject(400, *invalid, "The arguments must be a JSON object.")
    parsed = action.arguments_serializer(data=arguments)
    if not parsed.is_valid():
        message = "The arguments do not match the tool's input schema."
        return arguments, None, call.reject(400, *invalid, message, fields=parsed.errors)
    return arguments, dict(parsed.validated_data), None


def _propose(call: _Call, action: Action, validated: dict[str, Any], base_url: str) -> tuple[int, dict[str, Any]]:
    """The policy's answer: 201 a new preview, 200 the same pending one, 422 a refusal."""
    outcome = proposal_submit(
        agent_session=call.session,
        action=action,
        arguments=validated,
        raw_arguments=call.raw_arguments,
        call_id=call.call_id,
    )
    http_status: int
    if outcome.kind == "refused":
        assert outcome.refusal is not None, "a refused outcome carries its refusal"
        body = error_body(**outcome.refusal.as_dict())
        http_status = status.HTTP_422_UNPROCESSABLE_ENTITY
    else:
        assert outcome.preview is not None, "a created or repeated outcome carries its preview"
        body = with_open_siblings(preview_envelope(outcome.preview, base_url=base_url), outcome.preview)
        http_status = status.HTTP_201_CREATED if outcome.kind == "created" else status.HTTP_200_OK
    if call.call_id is not None:
        body["call_id"] = call.call_id
    return http_status, body


def _answered_once(
    call: _Call, key: str, arguments: Any, propose: Callable[[], tuple[int, dict[str, Any]]]
) -> CallAnswer:
    """With an Idempotency-Key: the first answer for this key and body, replayed after; 409 for another body."""
    if not IDEMPOTENCY_KEY.match(key):
        return call.reject(
            400,
            AuditEvent.PROPOSAL_INVALID,
            ErrorCode.INVALID_IDEMPOTENCY_KEY,
            "The Idempotency-Key header must be 1 to 255 visible ASCII characters.",
        )
    fingerprint = digest_of({"name": call.tool_name, "arguments": arguments, "call_id": call.call_id})
    replayed: list[bool] = [True]

    def first_time() -> tuple[int, dict[str, Any]]:
        replayed[0] = False
        return propose()

    try:
        http_status, body = idempotent_call(
            agent_session=call.session, key=key, fingerprint=fingerprint, run=first_time, action=call.tool_name
        )
    except IdempotencyConflict as conflict:
        return call.reject(409, AuditEvent.PROPOSAL_INVALID, conflict.code, conflict.message)
    return CallAnswer(http_status, body, replayed=replayed[0])


def tool_call(
    *,
    session: AgentSession,
    tool_name: str,
    arguments: Any,
    call_id: str | None,
    idempotency_key: str | None,
    base_url: str,
    raw_arguments: str | None = None,
) -> CallAnswer:
    """Parse, check and propose one call of `tool_name` by `session`; every refusal is audited, and the
    audit keeps `raw_arguments`, the arguments' text as received, when the transport has it."""
    raw = raw_arguments if raw_arguments is not None else raw_arguments_text(arguments)
    call = _Call(session, tool_name, raw, call_id)
    action, refusal = _action_or_refusal(call)
    if refusal is not None:
        return refusal
    assert action is not None, "_action_or_refusal gives an action or a refusal"
    arguments, validated, refusal = _arguments_or_refusal(call, action, arguments)
    if refusal is not None:
        return refusal
    assert validated is not None, "_arguments_or_refusal gives the validated arguments or a refusal"

    def propose() -> tuple[int, dict[str, Any]]:
        return _propose(call, action, validated, base_url)

    if idempotency_key is None:
        return CallAnswer(*propose())
    return _answered_once(call, idempotency_key, arguments, propose)


def with_open_siblings(body: dict[str, Any], preview: Preview) -> dict[str, Any]:
    """A proposal's answer, told of the session's other open previews on the same subject: the first of
    them (or this one) to be executed makes the others out of date (superseded, nothing done), so the
    agent hears it now and may withdraw the ones it no longer wants."""
    siblings = session_open_siblings(preview)
    if not siblings:
        return body
    ids = [str(pk) for pk in siblings]
    others = "1 other open proposal" if len(ids) == 1 else f"{len(ids)} other open proposals"
    note = (
        f" This agent session has {others} on {preview.subject_type} {preview.subject_id} ({', '.join(ids)}): "
        "once one of them or this one is carried out, the rest go out of date and nothing is done with them. "
        f"Withdraw any you no longer want ({WITHDRAW_TOOL}, or {WITHDRAW_PATH})."
    )
    return {**body, "message": body["message"] + note, "other_open_previews": ids}


def preview_not_found_body() -> dict[str, Any]:
    """Another session's preview, another person's and none at all get the same answer."""
    return error_body(ErrorCode.NOT_FOUND, "This agent session proposed no preview with this id.")


def withdraw_call(*, session: AgentSession, preview_id: Any, base_url: str, call_id: str | None = None) -> CallAnswer:
    """Withdraw the session's own preview (approvals.core.services.preview_withdraw): 200 with its envelope,
    404 for a preview of another session or none, 409 once it no longer waits for a decision."""
    http_status: int
    try:
        preview = preview_withdraw(agent_session=session, preview_id=preview_id, call_id=call_id)
    except Preview.DoesNotExist:
        body = preview_not_found_body()
        http_status = status.HTTP_404_NOT_FOUND
    except DecisionError as refused:
        body = error_body(**refused.as_dict())
        http_status = status.HTTP_409_CONFLICT
    else:
        body = preview_envelope(preview, base_url=base_url)
        http_status = status.HTTP_200_OK
    if call_id is not None:
        body["call_id"] = call_id
    return CallAnswer(http_status, body)


def preview_of_session(session: AgentSession, preview_id: Any) -> Preview | None:
    """A preview this session's person proposed (someone else's is as if it did not exist), brought up to date."""
    preview = Preview.objects.filter(pk=preview_id, actor_id=session.user_id).first()
    return preview_refresh(preview=preview) if preview is not None else None


def current_answer(answer: CallAnswer, *, session: AgentSession, base_url: str, call_id: str | None) -> CallAnswer:
    """A replayed answer about a preview, told as the preview stands now (decided, executed, failed)."""
    preview_id = answer.preview_id
    if answer.refused or preview_id is None:
        return answer
    preview = preview_of_session(session, preview_id)
    if preview is None:
        return answer
    body = preview_envelope(preview, base_url=base_url)
    if call_id is not None:
        body["call_id"] = call_id
    return CallAnswer(answer.http_status, body, replayed=answer.replayed)
