"""Once created `invoices.send_any_invoice` and gave it to the group "Billing". That role is declared
by invoices (invoices.permissions.STAFF_ROLES) and created with its permission by the engine after
every migrate (approvals.staff_roles); this migration does nothing.

It stays, empty, because deployed databases have it recorded and invoices 0004 depends on it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("invoices", "0002_delivery_alter_invoice_options_and_more"),
        ("approvals", "0002_staff_groups"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = []
