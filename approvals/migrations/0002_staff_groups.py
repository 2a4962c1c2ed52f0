from django.db import migrations

STAFF_GROUPS = ("Refund reviewers", "Invoice approvers", "Billing")


def create_groups(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    for name in STAFF_GROUPS:
        Group.objects.get_or_create(name=name)


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=STAFF_GROUPS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
