"""The MCP server at /mcp: the agent API's tools over the Model Context Protocol (revision 2026-07-28).

Built on the official `mcp` SDK's low-level `Server`, served statelessly with JSON responses over
Streamable HTTP (`StreamableHTTPSessionManager(stateless=True, json_response=True)`). It is a Django view,
so `config.wsgi:application` serves it on the same host and port as the REST API, through the same
middleware (request ids, metrics, logs, ALLOWED_HOSTS), under runserver, gunicorn's sync workers and the
test server alike, with no second process.

How the SDK's ASGI app runs inside a WSGI request: the view answers each POST by running the SDK for
that one request in an event loop (`async_to_sync`), and the tool handlers do their database work with
`sync_to_async`, which asgiref runs back in the request's own thread. So the ORM works exactly as in a
REST view: the thread's own connection, its CONN_MAX_AGE and health checks, one transaction per
service call, and the connection Django closes when the request finishes. (Adapting the SDK's ASGI app
with a2wsgi would run the handlers on a long-lived event loop in another thread, whose database
connections Django never closes, and outside the request's middleware.) Nothing outlives a request:
each one gets a fresh session manager, which in stateless mode holds no state anyway, so there is
nothing to open after a fork.

What the server does:
- The bearer agent token authenticates the request exactly as on the REST API (401 otherwise); the
  token's session decides the actor and the tools, whatever the request says.
- `tools/list` is exactly the session's tools, with input schemas from the same serializers and
  annotations (`destructiveHint`, `idempotentHint`).
- `tools/call` goes through `approvals.agents.api.calls.tool_call`, as `POST /api/agent/tool-calls` does: the
  same parsing, policy, idempotency and audit. A `call_id` in the request's `_meta` is the idempotency
  key (as the REST `Idempotency-Key`), echoed and audited; without one the same arguments within the
  session stand for the same call. A repeated call answers with the preview as it stands now, so the
  same call after the decision reports the executor's outcome.
- A refusal is a result with `isError`, its code and its numbers in the text and the structured content.
- A preview waiting for the customer answers with an `InputRequiredResult` holding a URL-mode
  elicitation of the confirmation page (which only the preview's actor can use); the client's retry
  (with `input_responses` and the echoed signed `request_state`) answers with the preview's state. A
  client that declared no elicitation gets the same state with the URL in the text.
"""

from approvals.agents.mcp_server.endpoint import mcp_endpoint
from approvals.agents.mcp_server.tools import mcp_server

__all__ = ["mcp_endpoint", "mcp_server"]
