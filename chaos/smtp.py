"""An SMTP peer on a loopback port (aiosmtpd) that keeps every message by its Message-ID, and can be told
to drop the connection after DATA: it has the message, the sender never hears so."""

from __future__ import annotations

import email
import email.message
import threading
from collections import Counter
from typing import Any

from aiosmtpd.controller import Controller

from chaos.stack import free_port


class SmtpPeer:
    def __init__(self) -> None:
        self.messages: list[dict[str, str]] = []
        self.drop_after_data = False
        self.dropped = 0
        self._lock = threading.Lock()
        peer = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's
                message = email.message_from_bytes(envelope.original_content or envelope.content)
                with peer._lock:
                    peer.messages.append(
                        {
                            "message_id": str(message.get("Message-ID", "")),
                            "to": ",".join(envelope.rcpt_tos),
                            "subject": str(message.get("Subject", "")),
                            "body": _text(message),
                        }
                    )
                    drop = peer.drop_after_data
                    if drop:
                        peer.dropped += 1
                if drop:
                    server.transport.abort()  # no 250: the sender cannot know it was taken
                return "250 Message accepted for delivery"

        self.port = free_port()
        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port, ready_timeout=10)

    def start(self) -> SmtpPeer:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def sent_twice(self) -> int:
        """The same message (recipient, subject, body) under more than one Message-ID: sent twice. The same
        Message-ID twice is one message delivered twice, which a mail client shows once."""
        with self._lock:
            ids: dict[tuple[str, str, str], set[str]] = {}
            for m in self.messages:
                ids.setdefault((m["to"], m["subject"], m["body"]), set()).add(m["message_id"])
        return sum(len(found) - 1 for found in ids.values() if len(found) > 1)

    def count_by_id(self) -> Counter[str]:
        with self._lock:
            return Counter(m["message_id"] for m in self.messages)


def _text(message: email.message.Message) -> str:
    if message.is_multipart():
        return "".join(_text(part) for part in message.get_payload() if isinstance(part, email.message.Message))
    payload = message.get_payload(decode=True)
    return payload.decode(errors="replace") if isinstance(payload, bytes) else str(payload)
