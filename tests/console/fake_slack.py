"""A local server that speaks the part of Slack's Web API the gateway uses, as `slack_sdk`'s WebClient
calls it (`POST <base>/chat.postMessage` with a JSON body, `GET <base>/users.info?user=…`, a bearer
token), stdlib only, on 127.0.0.1. It records every call and keeps the channel's messages as Slack
would (a `ts` per message, replaced by chat.update), so that tests read what a reviewer sees.

* `users[U…] = {...}` are the workspace's users for users.info (`user(…)` makes one);
* `rate_limit_next(n, retry_after)` answers the next n calls with a 429 and `Retry-After`, as Slack does;
* `messages[(channel, ts)]` the channel's messages as they are now, `calls` every call received
  (`calls_to("chat.update")`), `ephemerals` what was shown to one user alone.

`signed(payload, secret)` gives the body and headers Slack sends to the interactivity URL
(form-encoded `payload=<JSON>`, `X-Slack-Request-Timestamp`, `X-Slack-Signature: v0=HMAC-SHA256(
secret, "v0:<timestamp>:<body>")`); `button_click` and `reject_submission` build the payloads.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

TOKEN = "xoxb-test-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0REVIEW"


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    token: str


def user(slack_id: str, email: str, *, confirmed: bool = True, deleted: bool = False) -> dict[str, Any]:
    return {
        "id": slack_id,
        "name": slack_id.lower(),
        "deleted": deleted,
        "is_bot": False,
        "is_email_confirmed": confirmed,
        "profile": {"email": email, "real_name": slack_id},
    }


class FakeSlack:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.users: dict[str, dict[str, Any]] = {}
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.ephemerals: list[dict[str, Any]] = []
        self.views: list[dict[str, Any]] = []
        self._limited: list[float] = []
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, params: dict[str, Any]) -> None:
                method = urlsplit(self.path).path.rsplit("/", 1)[-1]
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                status, body, headers = fake._call(method, params, token)
                self._answer(status, body, headers)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._handle(dict(parse_qsl(urlsplit(self.path).query)))

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    params = json.loads(raw or "{}")
                else:
                    params = dict(parse_qsl(raw))
                params.update(dict(parse_qsl(urlsplit(self.path).query)))
                self._handle(params)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeSlack:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # What the tests arrange and read ---------------------------------------------------------------

    def rate_limit_next(self, count: int = 1, retry_after: float = 30) -> None:
        self._limited.extend([retry_after] * count)

    def calls_to(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method == method]

    def only_message(self) -> dict[str, Any]:
        assert len(self.messages) == 1, self.messages
        return next(iter(self.messages.values()))

    # Slack's side -----------------------------------------------------------------------------

    def _call(self, method: str, params: dict[str, Any], token: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self._lock:
            self.calls.append(Call(method, params, token))
            if self._limited:
                retry_after = self._limited.pop(0)
                return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": f"{retry_after:g}"}
            if token != self.token:
                return 200, {"ok": False, "error": "invalid_auth"}, {}
            handler = getattr(self, "_" + method.replace(".", "_"), None)
            if handler is None:
                return 200, {"ok": False, "error": "unknown_method"}, {}
            return 200, handler(params), {}

    def _chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:  # noqa: N802 - Slack's name
        channel = params.get("channel")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        ts = f"{int(time.time())}.{next(self._ts):06d}"
        message = {"ts": ts, "channel": channel, "text": params.get("text", ""), "blocks": params.get("blocks", [])}
        self.messages[(channel, ts)] = message
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        key = (params.get("channel"), params.get("ts"))
        if key not in self.messages:
            return {"ok": False, "error": "message_not_found"}
        self.messages[key].update(text=params.get("text", ""), blocks=params.get("blocks", []))
        return {"ok": True, "channel": key[0], "ts": key[1], "text": params.get("text", "")}

    def _chat_postEphemeral(self, params: dict[str, Any]) -> dict[str, Any]:  # noqa: N802 - Slack's name
        self.ephemerals.append(params)
        return {"ok": True, "message_ts": f"{int(time.time())}.{next(self._ts):06d}"}

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        found = self.users.get(str(params.get("user")))
        return {"ok": True, "user": found} if found else {"ok": False, "error": "user_not_found"}

    def _views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        view = params.get("view")
        if isinstance(view, str):
            view = json.loads(view)
        if not params.get("trigger_id"):
            return {"ok": False, "error": "invalid_trigger_id"}
        self.views.append(view)
        return {"ok": True, "view": {"id": f"V{next(self._ts)}", **view}}


# What Slack sends to the interactivity URL --------------------------------------------------------


def signed(
    payload: dict[str, Any], secret: str = SIGNING_SECRET, *, timestamp: int | None = None
) -> tuple[str, dict[str, str]]:
    """The form-encoded body and the headers (as Django test client keyword arguments)."""
    body = urlencode({"payload": json.dumps(payload)})
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = "v0=" + hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return body, {"HTTP_X_SLACK_REQUEST_TIMESTAMP": stamp, "HTTP_X_SLACK_SIGNATURE": signature}


def _message_actions(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for block in message["blocks"] if block["type"] == "actions" for e in block["elements"]]


def button(message: dict[str, Any], action_id: str) -> dict[str, Any]:
    """The button of a message as the gateway drew it (raises when it has none any more)."""
    found = [e for e in _message_actions(message) if e.get("action_id") == action_id]
    assert found, f"no {action_id} button in {message['blocks']}"
    return found[0]


def button_click(message: dict[str, Any], action_id: str, slack_user_id: str, *, value: str | None = None) -> dict:
    """A `block_actions` payload, as Slack sends it when `slack_user_id` clicks that button of the message."""
    pressed = button(message, action_id)
    return {
        "type": "block_actions",
        "user": {"id": slack_user_id, "username": slack_user_id.lower(), "team_id": "T0SHOP"},
        "team": {"id": "T0SHOP", "domain": "shop"},
        "channel": {"id": message["channel"], "name": "reviews"},
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": message["channel"]},
        "message": {"ts": message["ts"], "text": message["text"]},
        "trigger_id": f"trigger-{slack_user_id}-{time.time_ns()}",
        "response_url": "https://hooks.slack.invalid/actions/T0SHOP/1/abc",
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "review",
                "value": pressed.get("value", "") if value is None else value,
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


def reject_submission(view: dict[str, Any], slack_user_id: str, note: str) -> dict[str, Any]:
    """A `view_submission` payload: the reject modal the gateway opened, submitted with a reason."""
    return {
        "type": "view_submission",
        "user": {"id": slack_user_id, "username": slack_user_id.lower(), "team_id": "T0SHOP"},
        "team": {"id": "T0SHOP", "domain": "shop"},
        "view": {
            **view,
            "id": "V123",
            "state": {"values": {"note": {"note": {"type": "plain_text_input", "value": note}}}},
        },
    }
