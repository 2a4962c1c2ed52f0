"""Annotations shared by the engine's views (mypy with django-stubs, docs/development.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from django.http import HttpRequest

if TYPE_CHECKING:
    # settings.AUTH_USER_MODEL: django-stubs resolves request.user and every user foreign key to it.
    from django.contrib.auth.models import AbstractBaseUser, User


class AuthenticatedHttpRequest(HttpRequest):
    """The request of a view behind `login_required` (or the console's guard): its user is a person,
    never AnonymousUser. An annotation only: Django still passes its own HttpRequest."""

    user: User


def stored_person(person: AbstractBaseUser) -> User:
    """`person` as the engine's foreign keys to settings.AUTH_USER_MODEL type it. The services take any
    AbstractBaseUser (the plug-in interface does); the people they are given are rows of the installed
    user model, the one those foreign keys point to. An annotation only: returns `person` itself."""
    return cast("User", person)
