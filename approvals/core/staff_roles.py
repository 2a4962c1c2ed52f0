"""The staff groups the engine (`ENGINE_STAFF_ROLES`) and the registered actions (`Action.staff_roles`)
declare, put in the database after every `migrate` (and every `flush`, which sends post_migrate too):
each group is created when missing and given the permissions its role declares. No action writes a data
migration for its groups.

Nothing is ever taken away. A permission an operator gave a group by hand stays, and so does one a
role no longer declares: taking a grant away is a decision about people, made by an operator or by
a migration that says so, never as a side effect of deploying."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.apps import apps as global_apps
from django.apps.registry import Apps
from django.contrib.auth.management import create_permissions
from django.db import DEFAULT_DB_ALIAS, router
from django.db.models import Q

from approvals.core.registry import StaffRole, registry

#: The engine's own role: leads, who hand a reviewer's claim on and remove a staff member's passkeys when a
#: device is lost (approvals.core.services.passkeys). Created empty; an operator puts people in it.
LEADS = "Console leads"
ENGINE_STAFF_ROLES = (StaffRole(LEADS, ("approvals.manage_passkeys", "approvals.manage_review_claims")),)


def staff_roles_migrate(
    sender: AppConfig | None = None,
    *,
    apps: Apps = global_apps,
    using: str = DEFAULT_DB_ALIAS,
    verbosity: int = 1,
    **kwargs: Any,
) -> None:
    """The post_migrate receiver (approvals.apps): give every declared group its permissions.
    `apps` is the migrated state, as post_migrate passes it."""
    try:
        group_model = apps.get_model("auth", "Group")
        permission_model = apps.get_model("auth", "Permission")
    except LookupError:  # auth is not migrated (yet) on this database
        return
    if not router.allow_migrate_model(using, group_model):
        return
    roles = [*ENGINE_STAFF_ROLES, *registry.staff_roles()]
    # Django creates an app's permissions when post_migrate is sent for that app, in INSTALLED_APPS
    # order; this runs on the engine's turn, before the actions' apps had theirs. Create them now
    # (create_permissions skips those that exist).
    for label in sorted({name.split(".", 1)[0] for role in roles for name in role.permissions}):
        if label in global_apps.app_configs:
            create_permissions(
                global_apps.get_app_config(label), verbosity=0, interactive=False, using=using, apps=apps
            )
    for role in roles:
        group, created = group_model.objects.using(using).get_or_create(name=role.group)
        if created and verbosity >= 2:
            print(f"Adding staff group '{role.group}'")
        wanted = Q(pk__in=[])
        for name in role.permissions:
            app_label, codename = name.split(".", 1)
            wanted |= Q(content_type__app_label=app_label, codename=codename)
        # A declared permission missing here belongs to a model this database is not migrated to (a
        # partial or backwards migrate); the next full migrate grants it. One that no model declares
        # at all stops `manage.py check` (approvals.E002) before anything runs.
        permissions = permission_model.objects.using(using).filter(wanted)
        held = set(group.permissions.values_list("pk", flat=True))
        missing = [permission for permission in permissions if permission.pk not in held]
        if missing:
            group.permissions.add(*missing)
            if verbosity >= 2:
                print(f"Giving staff group '{role.group}' {len(missing)} permission(s)")
