"""Once created the staff groups by name. The groups are now the actions' own (Action.staff_roles),
created with their permissions after every migrate (approvals.staff_roles); this migration does nothing.

It stays, empty, because deployed databases have it recorded and later migrations (approvals 0003,
invoices 0003) depend on it: deleting it would leave them pointing at a migration that no longer
exists. Its groups are not removed on a deployed database (people are in them)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = []
