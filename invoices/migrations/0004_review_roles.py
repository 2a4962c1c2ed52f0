"""send_invoice's review permission moves from the engine (`approvals.review_send_invoice`, approvals
0003) to invoices (`invoices.review_send_invoice`, on Invoice): every group and person holding the old
one gets the new one instead, and the old one is deleted. On a database that never had the old one
this does nothing.

The group "Invoice approvers" is no longer made here: invoices declares it
(invoices.permissions.STAFF_ROLES) and the engine creates it with its permissions after every
migrate (approvals.staff_roles). The move stays because nothing else knows the old permission's
name: without it a person or a group holding only the old one would lose the review of invoice sends."""

from django.conf import settings
from django.db import migrations

CODENAME = "review_send_invoice"
NAME = "Can approve, reject and retry invoice send previews"


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
        _move(apps, old, _permission(apps, "invoices", "invoice", CODENAME, NAME))


def backward(apps, schema_editor):
    new = _permission(apps, "invoices", "invoice", CODENAME, NAME)
    _move(apps, new, _permission(apps, "approvals", "preview", CODENAME, NAME))


class Migration(migrations.Migration):
    dependencies = [
        ("invoices", "0003_billing_may_send_any_invoice"),
        ("approvals", "0003_console_permissions"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="invoice",
            options={
                "ordering": ["number"],
                "permissions": [
                    ("send_any_invoice", "Can have any invoice sent through their own agent session"),
                    (CODENAME, NAME),
                ],
            },
        ),
        migrations.RunPython(forward, backward),
    ]
