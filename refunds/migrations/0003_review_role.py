"""refund_order's review permission moves from the engine (`approvals.review_refund_order`, approvals
0003) to refunds (`refunds.review_refund_order`, on Order): every group and person holding the old
one gets the new one instead, and the old one is deleted. On a database that never had the old one
this does nothing.

The group "Refund reviewers" is no longer made here: refunds declares it (refunds.permissions.STAFF_ROLES)
and the engine creates it with its permissions after every migrate (approvals.staff_roles). The move
stays because nothing else knows the old permission's name: without it a person or a group holding
only the old one would lose the review of refunds."""

from django.conf import settings
from django.db import migrations

CODENAME = "review_refund_order"
NAME = "Can approve, reject and retry refund previews"


def _permission(apps, app_label, model, codename, name):
    content_type, _ = apps.get_model("contenttypes", "ContentType").objects.get_or_create(
        app_label=app_label, model=model
    )
    permission, _ = apps.get_model("auth", "Permission").objects.get_or_create(
        content_type=content_type, codename=codename, defaults={"name": name}
    )
    return permission


def _move(apps, old, new):
    """Give `new` to every group and person holding `old`, then delete `old`."""
    Group = apps.get_model("auth", "Group")
    User = apps.get_model(settings.AUTH_USER_MODEL)
    for group in Group.objects.filter(permissions=old):
        group.permissions.add(new)
    for user in User.objects.filter(user_permissions=old):
        user.user_permissions.add(new)
    old.delete()


def forward(apps, schema_editor):
    old = apps.get_model("auth", "Permission").objects.filter(
        content_type__app_label="approvals", codename=CODENAME
    ).first()
    if old is not None:
        _move(apps, old, _permission(apps, "refunds", "order", CODENAME, NAME))


def backward(apps, schema_editor):
    new = _permission(apps, "refunds", "order", CODENAME, NAME)
    _move(apps, new, _permission(apps, "approvals", "preview", CODENAME, NAME))


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0002_refund_status_provider_events_drifts"),
        ("approvals", "0003_console_permissions"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="order",
            options={
                "ordering": ["-placed_at", "number"],
                "permissions": [(CODENAME, NAME)],
            },
        ),
        migrations.RunPython(forward, backward),
    ]
