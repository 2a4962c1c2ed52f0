"""Money is an integer in the currency's minor unit plus an ISO 4217 code."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from decimal import Decimal

from babel import Locale, UnknownLocaleError
from babel.numbers import (
    NumberFormatError,
    format_currency,
    format_decimal,
    get_currency_precision,
    get_decimal_symbol,
    get_group_symbol,
    list_currencies,
    parse_decimal,
)

DISPLAY_LOCALE = "en_US"
_KNOWN_CURRENCIES = frozenset(list_currencies())

# The locale amounts typed by people are read in (set per request by whoever knows the person's locale,
# e.g. the console for a reviewer), so that the same typed text means the same amount at every step.
_input_locale: ContextVar[str] = ContextVar("money_input_locale", default=DISPLAY_LOCALE)

_SPACES = frozenset(" \u00a0\u202f")


def is_known_currency(code: str) -> bool:
    return code in _KNOWN_CURRENCIES


def currency_exponent(code: str) -> int:
    """Digits after the decimal point (EUR 2, JPY 0, KWD 3)."""
    return get_currency_precision(code)


def format_minor(amount_minor: int, currency: str, locale: str = DISPLAY_LOCALE) -> str:
    """`500, "EUR"` → `€5.00`; `500, "JPY"` → `¥500`."""
    exponent = currency_exponent(currency)
    amount = Decimal(amount_minor).scaleb(-exponent)
    return format_currency(amount, currency, locale=locale, currency_digits=True)


def known_locale(name: str) -> str:
    """`name` if Babel knows it (`de`, `en_GB`), else the display locale."""
    try:
        return str(Locale.parse(name))
    except (UnknownLocaleError, ValueError, TypeError):
        return DISPLAY_LOCALE


@contextlib.contextmanager
def amounts_typed_in(locale: str) -> Iterator[str]:
    """Within the block, parse_major reads amounts as people of `locale` write them."""
    token = _input_locale.set(known_locale(locale))
    try:
        yield _input_locale.get()
    finally:
        _input_locale.reset(token)


def input_locale() -> str:
    return _input_locale.get()


def how_to_write(currency: str, locale: str) -> str:
    """An example amount as `locale` writes it, with the currency's decimals: `1,234.50` / `1.234,50`."""
    exponent = currency_exponent(currency)
    example = Decimal(123450).scaleb(-2).quantize(Decimal(1).scaleb(-exponent))
    pattern = "#,##0" + ("." + "0" * exponent if exponent else "")
    written = format_decimal(example, format=pattern, locale=locale)
    decimal_symbol, group_symbol = get_decimal_symbol(locale), get_group_symbol(locale)
    decimals = f"'{decimal_symbol}' before the decimals and " if exponent else ""
    group = "a space" if group_symbol in _SPACES else f"'{group_symbol}'"
    return f"write it with ASCII digits, {decimals}{group} or nothing between thousands, e.g. {written}"


def example_major(currency: str, locale: str | None = None) -> str:
    """An example amount for a form's hint, with exactly the currency's decimals, as `locale` (by default the
    one amounts are typed in) writes it: EUR `49.90`, JPY `4990`, KWD `49.900`."""
    exponent = currency_exponent(currency)
    example = Decimal(4990).scaleb(-min(exponent, 2)).quantize(Decimal(1).scaleb(-exponent))
    pattern = "0" + ("." + "0" * exponent if exponent else "")
    return format_decimal(example, format=pattern, locale=known_locale(locale) if locale else input_locale())


def decimals_words(currency: str) -> str:
    """`no decimals`, `2 decimals`, `3 decimals`: how many digits an amount in `currency` has after the point."""
    exponent = currency_exponent(currency)
    return "no decimals" if exponent == 0 else f"{exponent} decimal{'s' if exponent > 1 else ''}"


def parse_major(text: str, currency: str, locale: str | None = None) -> int:
    """A person's amount in major units as minor units, read by the rules of `locale` (by default the
    locale set with amounts_typed_in): `"49.90"`, `"1,000.50"` in en_US, `"49,90"` in de. Only ASCII
    digits with the locale's decimal and group symbols; no sign, no exponent. Raises ValueError, with how
    to write it, for anything else, for text the locale reads ambiguously (`"4,50"` in en_US could be
    4.50 or 450), and for more decimals than the currency has."""
    locale = known_locale(locale) if locale else input_locale()
    cleaned = text.strip()
    decimal_symbol, group_symbol = get_decimal_symbol(locale), get_group_symbol(locale)
    allowed = {decimal_symbol, group_symbol} | (_SPACES if group_symbol in _SPACES else set())
    if not cleaned or not all(("0" <= c <= "9") or c in allowed for c in cleaned) or not re.search("[0-9]", cleaned):
        raise ValueError(f"{text[:40]!r} is not an amount: {how_to_write(currency, locale)}")
    if group_symbol in _SPACES:  # people type any space for the locale's (narrow) no-break space
        cleaned = re.sub("[ \u00a0\u202f]", group_symbol, cleaned)
    try:
        amount = parse_decimal(cleaned, locale=locale, strict=True)
    except NumberFormatError as error:
        suggestions = getattr(error, "suggestions", None) or []
        meant = f" (did you mean {' or '.join(suggestions)}?)" if suggestions else ""
        raise ValueError(
            f"{text[:40]!r} is ambiguous or malformed as written in {locale}{meant}: {how_to_write(currency, locale)}"
        ) from error
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"{text[:40]!r} is not an amount: {how_to_write(currency, locale)}")
    minor = amount.scaleb(currency_exponent(currency))
    if minor != minor.to_integral_value():
        raise ValueError(f"{currency} has {currency_exponent(currency)} decimal places; {text[:40]!r} has more")
    return int(minor)
