"""Fixtures for the Stripe adapter: a local Stripe-compatible server and settings pointing at it."""

import pytest

from tests.refunds.fake_stripe import FakeStripe

STRIPE_TEST_KEY = "sk_test_x"
# The client gives up on an answer after this long; a "time out" fault answers later than that.
STRIPE_TEST_TIMEOUT_SECONDS = 0.5


@pytest.fixture
def fake_stripe():
    with FakeStripe(api_key=STRIPE_TEST_KEY) as server:
        yield server


@pytest.fixture
def stripe_gateway_settings(settings, fake_stripe):
    settings.PAYMENT_GATEWAY = "stripe"
    settings.STRIPE_API_KEY = STRIPE_TEST_KEY
    settings.STRIPE_API_BASE = fake_stripe.url
    settings.STRIPE_TIMEOUT_SECONDS = STRIPE_TEST_TIMEOUT_SECONDS
    return settings
