"""The audit log becomes a Merkle tree with signed tree heads (approvals.audit_log, approvals.audit_seal).

Records are plain inserts now: the chain's columns and its one locked head row go, and so does the
PostgreSQL append function. Each record carries the id of the transaction that inserted it (PostgreSQL),
by which the sealer knows when no earlier transaction can still commit. Leaves and tree heads are
append-only like the records, and on PostgreSQL a statement-level trigger refuses TRUNCATE of all three.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import approvals.models

AUDIT_TABLES = ("approvals_auditrecord", "approvals_auditleaf", "approvals_audittreehead")

TRIGGERS_SQL = """
CREATE OR REPLACE FUNCTION approvals_refuse_audit_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
END;
$$ LANGUAGE plpgsql;
""" + "".join(
    f"""
DROP TRIGGER IF EXISTS {table}_append_only ON {table};
CREATE TRIGGER {table}_append_only
    BEFORE UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION approvals_refuse_audit_change();
CREATE TRIGGER {table}_no_truncate
    BEFORE TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION approvals_refuse_audit_change();
"""
    for table in AUDIT_TABLES
)

DROP_TRIGGERS_SQL = "".join(
    f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};\n" for table in AUDIT_TABLES
) + "".join(
    f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};\n" for table in AUDIT_TABLES[1:]
)


def drop_append_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "DROP FUNCTION IF EXISTS approvals_audit_append(text[], text[], uuid[], bigint[], bigint[], text[], "
            "text[], text[], text[], text[], text[], text[], text[], text[])"
        )
        schema_editor.execute("DROP FUNCTION IF EXISTS approvals_utc_isoformat(timestamptz)")


def install_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGERS_SQL, None)


def drop_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_TRIGGERS_SQL, None)


class Migration(migrations.Migration):
    dependencies = [("approvals", "0010_execution_state_machine")]

    operations = [
        migrations.RunPython(drop_append_function, migrations.RunPython.noop),
        migrations.RemoveField(model_name="auditrecord", name="sequence"),
        migrations.RemoveField(model_name="auditrecord", name="previous_hash"),
        migrations.RemoveField(model_name="auditrecord", name="record_hash"),
        migrations.DeleteModel(name="AuditChainHead"),
        migrations.AlterField(
            model_name="auditrecord",
            name="created_at",
            field=models.DateTimeField(db_index=True, default=django.utils.timezone.now),
        ),
        migrations.AddField(
            model_name="auditrecord",
            name="transaction_id",
            field=models.BigIntegerField(db_default=approvals.models.CurrentTransactionId(), editable=False),
        ),
        migrations.AddIndex(
            model_name="auditrecord",
            index=models.Index(fields=["transaction_id", "id"], name="auditrecord_seal_order"),
        ),
        migrations.CreateModel(
            name="AuditLeaf",
            fields=[
                ("index", models.BigIntegerField(primary_key=True, serialize=False)),
                ("leaf_hash", models.CharField(max_length=64)),
                (
                    "record",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT, related_name="leaf", to="approvals.auditrecord"
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="AuditTreeHead",
            fields=[
                ("size", models.BigIntegerField(primary_key=True, serialize=False)),
                ("root_hash", models.CharField(max_length=64)),
                ("timestamp", models.BigIntegerField(help_text="Milliseconds since 1970, as signed.")),
                ("signature", models.CharField(max_length=100)),
                ("public_key", models.CharField(max_length=64)),
                (
                    "horizon",
                    models.BigIntegerField(
                        default=0,
                        help_text="PostgreSQL: records of transactions below this id were all sealed by this head.",
                    ),
                ),
            ],
            options={"ordering": ["size"]},
        ),
        migrations.RunPython(install_triggers, drop_triggers),
    ]
