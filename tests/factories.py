import datetime
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from refunds.models import Order, OrderStatus


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"customer{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.test")
    password = factory.PostGenerationMethodCall("set_password", "pass-for-tests")

    @classmethod
    def _after_postgeneration(cls, instance: Any, create: bool, results: dict[str, Any] | None = None) -> None:
        if create and results:
            instance.save()


class StaffFactory(UserFactory):
    username = factory.Sequence(lambda n: f"staff{n}")
    is_staff = True


class OrderFactory(factory.django.DjangoModelFactory[Order]):
    class Meta:
        model = Order

    number = factory.Sequence(lambda n: f"o-{1000 + n}")
    customer = factory.SubFactory(UserFactory)
    currency = "EUR"
    total_minor = 1000
    refunded_minor = 0
    status = OrderStatus.DELIVERED
    placed_at = datetime.date(2026, 8, 2)
    delivered_at = datetime.date(2026, 8, 4)
    payment_ref = factory.LazyAttribute(lambda o: f"pi_{o.number}")
