"""Annotations shared by the engine's views (mypy with django-stubs, docs/development.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest

if TYPE_CHECKING:
    # settings.AUTH_USER_MODEL: django-stubs resolves request.user and every user foreign key to it.
    from django.contrib.auth.models import User


class AuthenticatedHttpRequest(HttpRequest):
    """The request of a view behind `login_required` (or the console's guard): its user is a person,
    never AnonymousUser. An annotation only: Django still passes its own HttpRequest."""

    user: User
