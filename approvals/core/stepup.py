"""When a decision needs a passkey (step-up), and who the relying party is.

`STEP_UP_THRESHOLDS=refund_order:EUR:50000,send_invoice:*:0` reads: a staff approval of a refund in EUR
from €500.00 (50000 minor units) needs a passkey assertion over the preview's digest; so does every
staff approval of an invoice send. `CUSTOMER_STEP_UP_THRESHOLDS` says the same of the customer's
confirmation. Per action and currency, a band applies from its amount on (`*` matches any currency; a
preview without an amount is met only by bands from 0). Unset: no step-up. The thresholds are read when
the decision is taken, not fixed on the preview.

`WEBAUTHN_RP_ID` names the relying party (default: the host of PUBLIC_BASE_URL), `WEBAUTHN_ORIGINS` the
origins a browser may sign on (comma-separated; default: PUBLIC_BASE_URL's origin). User verification is
always required. `manage.py check` refuses a threshold it cannot read and origins the RP ID does not cover.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured

from approvals.core.money import format_minor
from approvals.models import ApprovalRole, Preview

ANY_CURRENCY = "*"
STAFF_SETTING = "STEP_UP_THRESHOLDS"
CUSTOMER_SETTING = "CUSTOMER_STEP_UP_THRESHOLDS"


@dataclass(frozen=True)
class StepUpBand:
    action: str
    currency: str
    from_minor: int


def parse_step_up_thresholds(value: str | Iterable[str], *, name: str = STAFF_SETTING) -> list[StepUpBand]:
    """Parse `action:CURRENCY:from_minor,…` (CURRENCY may be `*`); raises ValueError naming the bad item."""
    items = value.split(",") if isinstance(value, str) else list(value)
    bands = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        parts = [part.strip() for part in item.split(":")]
        if len(parts) != 3 or not parts[0] or not parts[1]:
            raise ValueError(f"{name} item {item!r} is not action:CURRENCY:from_minor (CURRENCY may be *)")
        currency = parts[1].upper()
        if currency != ANY_CURRENCY and not (len(currency) == 3 and currency.isalpha()):
            raise ValueError(f"{name} item {item!r}: the currency is a three-letter code such as EUR, or *")
        if not parts[2].isdigit():
            raise ValueError(f"{name} item {item!r}: the amount is a whole number of minor units, at least 0")
        bands.append(StepUpBand(parts[0], currency, int(parts[2])))
    return bands


@lru_cache(maxsize=16)
def _bands(value: str, name: str) -> tuple[StepUpBand, ...]:
    try:
        return tuple(parse_step_up_thresholds(value, name=name))
    except ValueError as error:  # `manage.py check` says so at start; a process that skipped it fails closed
        raise ImproperlyConfigured(str(error)) from error


def _setting_for(role: str) -> str:
    return CUSTOMER_SETTING if role == ApprovalRole.CUSTOMER else STAFF_SETTING


def step_up_band(preview: Preview, role: str) -> StepUpBand | None:
    """The band that makes `role`'s approval of this preview need a passkey (the highest one reached),
    or None when it needs none."""
    name = _setting_for(role)
    value = getattr(settings, name, "")
    if not value:
        return None
    currencies = (preview.currency.upper(), ANY_CURRENCY) if preview.currency else (ANY_CURRENCY,)
    amount = preview.amount_minor if preview.amount_minor is not None else 0
    matching = [
        band
        for band in _bands(value, name)
        if band.action == preview.action and band.currency in currencies and amount >= band.from_minor
    ]
    if not matching:
        return None
    return max(matching, key=lambda band: (band.from_minor, band.currency != ANY_CURRENCY))


def step_up_needed(preview: Preview, role: str) -> bool:
    return step_up_band(preview, role) is not None


def step_up_words(preview: Preview, role: str) -> str:
    """Why this decision needs a passkey, in the words the pages and refusals use ('' when it needs none):
    `This request is for €600.00, at or above €500.00: confirm it with your passkey.`"""
    band = step_up_band(preview, role)
    if band is None:
        return ""
    verb = "confirm" if role == ApprovalRole.CUSTOMER else "approve"
    if band.from_minor > 0 and preview.amount_minor is not None and preview.currency:
        amount = format_minor(preview.amount_minor, preview.currency)
        threshold = format_minor(band.from_minor, preview.currency)
        what = "request" if role == ApprovalRole.CUSTOMER else "preview"
        return f"This {what} is for {amount}, at or above {threshold}: {verb} it with your passkey."
    return f"Every {preview.action.replace('_', ' ')} needs a passkey: {verb} it with your passkey."


# The relying party ------------------------------------------------------------------------------


def _public_base() -> urllib.parse.SplitResult:
    return urllib.parse.urlsplit(settings.PUBLIC_BASE_URL)


def webauthn_rp_id() -> str:
    """WEBAUTHN_RP_ID, or the host of PUBLIC_BASE_URL."""
    return settings.WEBAUTHN_RP_ID or (_public_base().hostname or "")


def webauthn_origins() -> list[str]:
    """WEBAUTHN_ORIGINS, or PUBLIC_BASE_URL's origin (scheme, host and port)."""
    if settings.WEBAUTHN_ORIGINS:
        return list(settings.WEBAUTHN_ORIGINS)
    base = _public_base()
    return [f"{base.scheme}://{base.netloc}"]


def origin_problem(origin: str, rp_id: str) -> str | None:
    """Why a browser signing on `origin` could not use `rp_id`, or None (WebAuthn: the RP ID is the
    origin's host or a registrable suffix of it)."""
    parts = urllib.parse.urlsplit(origin)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.path or parts.query or parts.fragment:
        return f"{origin!r} is not an origin (scheme://host[:port], nothing after it)"
    host = parts.hostname
    if host != rp_id and not host.endswith("." + rp_id):
        return f"the origin {origin!r} is not on the RP ID {rp_id!r} (its host must be it or end in .{rp_id})"
    return None


@register()
def step_up_settings_are_usable(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """`manage.py check` (and every start): the thresholds parse, and the relying party fits its origins."""
    problems: list[CheckMessage] = []
    for name, hint in (
        (STAFF_SETTING, "STEP_UP_THRESHOLDS=refund_order:EUR:50000,send_invoice:*:0"),
        (CUSTOMER_SETTING, "CUSTOMER_STEP_UP_THRESHOLDS=refund_order:EUR:100000"),
    ):
        try:
            parse_step_up_thresholds(getattr(settings, name, ""), name=name)
        except ValueError as error:
            problems.append(Error(str(error), hint=hint, id="approvals.E103"))
    rp_id = webauthn_rp_id()
    if not rp_id:
        problems.append(
            Error(
                "WEBAUTHN_RP_ID is empty and PUBLIC_BASE_URL has no host.",
                hint="Set WEBAUTHN_RP_ID.",
                id="approvals.E104",
            )
        )
    for origin in webauthn_origins() if rp_id else []:
        problem = origin_problem(origin, rp_id)
        if problem:
            problems.append(
                Error(
                    f"WEBAUTHN_ORIGINS: {problem}.", hint="WEBAUTHN_ORIGINS=https://shop.example", id="approvals.E104"
                )
            )
        elif origin.startswith("http://") and urllib.parse.urlsplit(origin).hostname not in ("localhost", "127.0.0.1"):
            if settings.STEP_UP_THRESHOLDS or settings.CUSTOMER_STEP_UP_THRESHOLDS:
                problems.append(
                    Warning(
                        f"WEBAUTHN_ORIGINS: browsers offer passkeys only on https (or localhost), not on {origin}.",
                        id="approvals.W104",
                    )
                )
    return problems
