"""The system check that an action's review permission and staff roles name declared permissions."""

import copy

from approvals.core.checks import action_permissions_check
from approvals.core.registry import StaffRole, registry


def test_the_installed_actions_name_declared_permissions():
    assert action_permissions_check(None) == []


def test_an_action_naming_an_undeclared_permission_is_an_error(monkeypatch):
    typo = copy.copy(next(iter(registry.actions.values())))
    typo.name = "typo_action"
    typo.review_permission = "nowhere.review_typo"
    typo.staff_roles = (StaffRole("Typo reviewers", ("nowhere.review_typo", "approvals.export_auditrecord")),)
    monkeypatch.setitem(registry.actions, typo.name, typo)
    errors = action_permissions_check(None)
    assert [e.id for e in errors] == ["approvals.E002"]
    assert "'nowhere.review_typo'" in errors[0].msg
