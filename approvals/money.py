"""Money is an integer in the currency's minor unit plus an ISO 4217 code."""

from decimal import Decimal, InvalidOperation

from babel.numbers import format_currency, get_currency_precision, list_currencies

DISPLAY_LOCALE = "en_US"
_KNOWN_CURRENCIES = frozenset(list_currencies())


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


def parse_major(text: str, currency: str) -> int:
    """A person's amount in major units (`"50"`, `"49.90"`, `"1,000.50"`) as minor units; raises
    ValueError for anything else, or more decimals than the currency has."""
    cleaned = text.strip().replace(",", "").replace(" ", "")
    try:
        amount = Decimal(cleaned)
    except InvalidOperation as error:
        raise ValueError(f"{text!r} is not an amount") from error
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"{text!r} is not an amount")
    minor = amount.scaleb(currency_exponent(currency))
    if minor != minor.to_integral_value():
        raise ValueError(f"{currency} has {currency_exponent(currency)} decimal places; {text!r} has more")
    return int(minor)
