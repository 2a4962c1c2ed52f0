"""The staff role `rename_board` declares (RenameBoardAction.staff_roles): the "Board reviewers" group,
holding the permission that decides its previews and the engine's audit export. Permissions are normally created after all migrations
(post_migrate); it is created here so that the group can be given it now."""

from django.db import migrations

GROUP = "Board reviewers"
CODENAME = "review_rename_board"
NAME = "Can approve and reject board renames"


def grant(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    content_type, _ = ContentType.objects.get_or_create(app_label="toy_action", model="board")
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename=CODENAME, defaults={"name": NAME}
    )
    audit_type, _ = ContentType.objects.get_or_create(app_label="approvals", model="auditrecord")
    export, _ = Permission.objects.get_or_create(
        content_type=audit_type, codename="export_auditrecord", defaults={"name": "Can read and export the whole audit log"}
    )
    group, _ = Group.objects.get_or_create(name=GROUP)
    group.permissions.add(permission, export)


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("toy_action", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("approvals", "0003_console_permissions"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
