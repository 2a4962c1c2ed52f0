"""System checks of the audit log's settings (`manage.py check`)."""

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from approvals.audit.log import private_key_from
from approvals.audit.witnesses import witness_settings_problems


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


@register()
def audit_witnesses_check(app_configs: Any, **kwargs: Any) -> list[Error]:
    """AUDIT_WITNESSES entries are `<cosignature vkey>=<URL>`, each witness once; the quorum fits them.
    At request time a malformed entry is left out (approvals.audit.witnesses), never an exception."""
    return [
        Error(
            problem,
            hint="AUDIT_WITNESSES=<name>+<key ID>+<base64 of 0x04 and the Ed25519 key>=https://witness.example/add-checkpoint,…",
            id="approvals.E031",
        )
        for problem in witness_settings_problems()
    ]
