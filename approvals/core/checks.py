"""System checks of the approvals engine's settings (`manage.py check`)."""

from typing import Any

from django.core.checks import Error, register


def _declared_permissions() -> set[str]:
    """Every permission the installed models declare: Meta.permissions and the default ones."""
    from django.apps import apps

    declared: set[str] = set()
    for model in apps.get_models():
        meta = model._meta
        declared.update(f"{meta.app_label}.{codename}" for codename, _name in meta.permissions)
        declared.update(f"{meta.app_label}.{action}_{meta.model_name}" for action in meta.default_permissions)
    return declared


@register()
def action_permissions_check(app_configs: Any, **kwargs: Any) -> list[Error]:
    """Each registered action's review permission and staff roles name permissions a model declares, so
    that the console and the groups made after migrate agree (a typo would lock every reviewer out)."""
    from approvals.core.registry import registry

    declared = _declared_permissions()
    problems = []
    for action in registry.actions.values():
        named = {action.review_permission} | {p for role in action.staff_roles for p in role.permissions}
        for permission in sorted(named - declared):
            problems.append(
                Error(
                    f"Action {action.name!r} names the permission {permission!r}, which no model declares.",
                    hint="Declare it in the Meta.permissions of one of the action's own models "
                    "(app_label.codename) and name it in the action's staff_roles.",
                    id="approvals.E002",
                )
            )
    return problems
