from django.db import migrations


def grant(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    content_type, _ = ContentType.objects.get_or_create(app_label="invoices", model="invoice")
    permission, _ = Permission.objects.get_or_create(
        codename="send_any_invoice",
        content_type=content_type,
        defaults={"name": "Can have any invoice sent through their own agent session"},
    )
    billing, _ = Group.objects.get_or_create(name="Billing")
    billing.permissions.add(permission)


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.filter(codename="send_any_invoice", content_type__app_label="invoices").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("invoices", "0002_delivery_alter_invoice_options_and_more"),
        ("approvals", "0002_staff_groups"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
