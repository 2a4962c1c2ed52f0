"""System checks of the audit log's settings (`manage.py check`)."""

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from approvals.audit.log import private_key_from


@register()
def audit_signing_key_check(app_configs: Any, **kwargs: Any) -> list[Error]:
    """A set AUDIT_SIGNING_KEY must be an Ed25519 private key (the message never shows the value)."""
    text = settings.AUDIT_SIGNING_KEY
    if not text:
        return []
    try:
        private_key_from(text)
    except ValueError as error:
        return [
            Error(
                f"AUDIT_SIGNING_KEY is not an Ed25519 private key: {error}.",
                hint='Base64 of 32 random bytes: python -c "import base64,os;'
                'print(base64.b64encode(os.urandom(32)).decode())"',
                id="approvals.E001",
            )
        ]
    return []
