"""Customers and staff as `import_shop_data` knows them; staff roles are Django groups, the ones the
registered actions declare (Action.staff_roles), created after every migrate (approvals.core.staff_roles)."""

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework import serializers

from approvals.core.arguments import StrictCharField, StrictSerializer, UsernameField
from approvals.core.digests import sha256_hex
from approvals.core.registry import registry
from approvals.site.shop_import import ShopRecordRefused


def staff_group_names() -> list[str]:
    """The staff groups a person may be put in: those the registered actions declare."""
    return [role.group for role in registry.staff_roles()]


class CustomerImportSerializer(StrictSerializer):
    username = UsernameField()
    email = serializers.EmailField(required=False, allow_blank=True, default="")
    password = StrictCharField(max_length=128, required=False, allow_blank=False)


class StaffImportSerializer(CustomerImportSerializer):
    groups = serializers.ListField(child=serializers.ChoiceField(choices=[]), required=False, default=list)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The actions register after this module is imported: the choices come from the registry now.
        self.fields["groups"] = serializers.ListField(
            child=serializers.ChoiceField(choices=staff_group_names()), required=False, default=list
        )


def _person_upsert(data: dict[str, Any], *, is_staff: bool) -> str:
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=data["username"])
    changed = created or user.email != data["email"] or user.is_staff != is_staff
    user.email = data["email"]
    user.is_staff = is_staff
    if "password" in data and not user.check_password(data["password"]):
        user.set_password(data["password"])
        changed = True
    elif created:
        user.set_unusable_password()
    user.save()
    if is_staff:
        groups = list(Group.objects.filter(name__in=data["groups"]))
        if set(user.groups.values_list("name", flat=True)) != {g.name for g in groups}:
            user.groups.set(groups)
            changed = True
    if created:
        return "created"
    return "updated" if changed else "unchanged"


def customer_upsert(data: dict[str, Any]) -> str:
    return _person_upsert(data, is_staff=False)


def staff_upsert(data: dict[str, Any]) -> str:
    return _person_upsert(data, is_staff=True)


def person_describe(data: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """A person as stored, for the import's audit: never the password, only whether it changed."""
    user = get_user_model().objects.filter(username=data["username"]).first()
    if user is None:
        return "", None
    return str(user.pk), {
        "username": user.get_username(),
        "email": user.email,
        "is_staff": user.is_staff,
        "is_active": user.is_active,
        "is_superuser": user.is_superuser,
        "groups": sorted(user.groups.values_list("name", flat=True)),
        "has_usable_password": user.has_usable_password(),
        "_password": sha256_hex(user.password),
    }


def customer_version(user: Any) -> str:
    """A customer's version for the shop data API: a digest of what its record stores (username, email
    and the password's hash), so that any change, by the API, the import or the admin, gives a new one."""
    return sha256_hex(f"{user.get_username()}\n{user.email}\n{user.password}")[:16]


def customer_record(username: str, lock: bool) -> dict[str, Any] | None:
    """The customer as stored, in the import's item format (never the password), with its version; a
    staff member's username is refused: staff are kept by the import (their groups), not by the API."""
    users = get_user_model().objects.all()
    if lock:
        users = users.select_for_update()
    user = users.filter(username=username).first()
    if user is None:
        return None
    if user.is_staff or user.is_superuser:
        raise ShopRecordRefused(
            f"{username!r} is a staff member's username: staff are kept by import_shop_data, not this API.",
            code="staff_account",
        )
    return {"username": user.get_username(), "email": user.email, "version": customer_version(user)}
