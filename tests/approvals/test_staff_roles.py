"""The staff groups come from the registry after every migrate (approvals.core.staff_roles), not from data
migrations: created with their permissions, never changed by a second run, never stripped of what an
operator added; and an action cannot register without the permission that decides its previews."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from approvals.core.registry import Action, Registry, registry
from tests.toy_action.actions import RenameBoardAction

DECLARED = {
    "Refund reviewers": {"refunds.review_refund_order", "approvals.export_auditrecord"},
    "Invoice approvers": {"invoices.review_send_invoice", "approvals.export_auditrecord"},
    "Billing": {"invoices.send_any_invoice"},
    "Board reviewers": {"toy_action.review_rename_board", "approvals.export_auditrecord"},
}


def held(group_name: str) -> set[str]:
    group = Group.objects.get(name=group_name)
    return {
        f"{app_label}.{codename}"
        for app_label, codename in group.permissions.values_list("content_type__app_label", "codename")
    }


def migrate() -> None:
    call_command("migrate", verbosity=0, interactive=False)


def database_state() -> dict[str, list[tuple]]:
    return {
        "groups": sorted(Group.objects.values_list("pk", "name")),
        "grants": sorted(Group.permissions.through.objects.values_list("pk", "group_id", "permission_id")),
        "permissions": sorted(Permission.objects.values_list("pk", "content_type_id", "codename", "name")),
        "content_types": sorted(ContentType.objects.values_list("pk", "app_label", "model")),
    }


def test_the_migrated_database_has_every_declared_group_with_its_permissions(db):
    assert {name: held(name) for name in DECLARED} == DECLARED
    for role in registry.staff_roles():
        assert held(role.group) >= set(role.permissions), role.group


def test_migrate_creates_the_groups_and_their_permissions_where_there_are_none(db):
    Group.objects.all().delete()
    Permission.objects.filter(codename__in=[p.split(".")[1] for perms in DECLARED.values() for p in perms]).delete()

    migrate()

    assert {name: held(name) for name in DECLARED} == DECLARED


def test_migrate_again_changes_nothing(db):
    migrate()
    before = database_state()
    migrate()
    assert database_state() == before


def test_migrate_gives_back_a_declared_permission_and_keeps_one_an_operator_added(db):
    view_users = Permission.objects.get(content_type__app_label="auth", codename="view_user")
    Group.objects.get(name="Billing").permissions.add(view_users)
    reviewers = Group.objects.get(name="Refund reviewers")
    reviewers.permissions.remove(Permission.objects.get(codename="review_refund_order"))
    assert held("Refund reviewers") == {"approvals.export_auditrecord"}

    migrate()

    assert held("Billing") == {"invoices.send_any_invoice", "auth.view_user"}
    assert held("Refund reviewers") == DECLARED["Refund reviewers"]


def _action_class(**attributes: object) -> type[Action]:
    """A working action (the toy's hooks) with only the class attributes given, none of the toy's."""
    hooks = {name: getattr(RenameBoardAction, name) for name in Action.__abstractmethods__}
    return type("UnreviewedAction", (Action,), {**hooks, "name": "unreviewed", **attributes})


@pytest.mark.parametrize("attributes", [{}, {"review_permission": ""}], ids=["left_out", "empty"])
def test_an_action_without_a_review_permission_is_refused_at_registration(attributes):
    action = _action_class(**attributes)()
    fresh = Registry()
    with pytest.raises(ImproperlyConfigured, match=r"'unreviewed' declares no review_permission"):
        fresh.register_action(action)
    assert fresh.actions == {}
    fresh.register_action(_action_class(review_permission="toy_action.review_rename_board")())
    assert list(fresh.actions) == ["unreviewed"]
