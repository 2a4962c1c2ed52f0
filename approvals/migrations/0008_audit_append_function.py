"""Once the PostgreSQL audit append function (approvals_audit_append). The audit log is a plain insert
now and is sealed into a Merkle tree after commit (migration audit_merkle_log drops the function where
this migration had created it): nothing is left to do here."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("approvals", "0007_drop_indexes_covered_by_composites")]

    operations = []
