"""People and boards for the engine's tests: nothing here knows of refunds or invoices."""

import factory
from django.contrib.auth import get_user_model

from tests.toy_action.models import Board

PASSWORD = "pass-for-engine-tests"


class PersonFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"person{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.test")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @classmethod
    def _after_postgeneration(cls, instance, create, results=None):
        if create and results:
            instance.save()


class StaffPersonFactory(PersonFactory):
    username = factory.Sequence(lambda n: f"staffer{n}")
    is_staff = True


class BoardFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Board

    id = factory.Sequence(lambda n: f"b-{100 + n}")
    owner = factory.SubFactory(PersonFactory)
    title = "Roadmap"
