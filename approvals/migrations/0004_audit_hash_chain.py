"""Chain the audit log: each record carries the hash of the one before it. On PostgreSQL, a trigger
refuses UPDATE and DELETE on audit records, and on a preview's approved content."""

from django.db import migrations, models


def chain_existing_records(apps, schema_editor):
    # Numbers the records already there (the hash chain they were given then was replaced by the Merkle
    # tree of migration audit_merkle_log, which seals every record, these included).
    AuditRecord = apps.get_model("approvals", "AuditRecord")
    AuditChainHead = apps.get_model("approvals", "AuditChainHead")
    sequence = 0
    for record in AuditRecord.objects.order_by("id").iterator():
        sequence += 1
        record.sequence = sequence
        record.save(update_fields=["sequence"])
    AuditChainHead.objects.update_or_create(pk=1, defaults={"sequence": sequence, "record_hash": ""})


APPEND_ONLY_SQL = """
CREATE OR REPLACE FUNCTION approvals_refuse_audit_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'approvals_auditrecord is append-only: % refused', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER approvals_auditrecord_append_only
    BEFORE UPDATE OR DELETE ON approvals_auditrecord
    FOR EACH ROW EXECUTE FUNCTION approvals_refuse_audit_change();

CREATE OR REPLACE FUNCTION approvals_refuse_preview_content_change() RETURNS trigger AS $$
BEGIN
    IF (NEW.action, NEW.actor_id, NEW.subject_type, NEW.subject_id, NEW.subject_version, NEW.payload,
        NEW.amount_minor, NEW.currency, NEW.proposal_key, NEW.digest, NEW.required_approvals)
       IS DISTINCT FROM
       (OLD.action, OLD.actor_id, OLD.subject_type, OLD.subject_id, OLD.subject_version, OLD.payload,
        OLD.amount_minor, OLD.currency, OLD.proposal_key, OLD.digest, OLD.required_approvals)
    THEN
        RAISE EXCEPTION 'a preview''s content is immutable; propose a new preview instead';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER approvals_preview_content_immutable
    BEFORE UPDATE ON approvals_preview
    FOR EACH ROW EXECUTE FUNCTION approvals_refuse_preview_content_change();
"""

DROP_SQL = """
DROP TRIGGER IF EXISTS approvals_auditrecord_append_only ON approvals_auditrecord;
DROP FUNCTION IF EXISTS approvals_refuse_audit_change();
DROP TRIGGER IF EXISTS approvals_preview_content_immutable ON approvals_preview;
DROP FUNCTION IF EXISTS approvals_refuse_preview_content_change();
"""


def install_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_ONLY_SQL, None)


def drop_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_SQL, None)


class Migration(migrations.Migration):
    dependencies = [("approvals", "0003_console_permissions")]

    operations = [
        migrations.CreateModel(
            name="AuditChainHead",
            fields=[
                ("id", models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("sequence", models.PositiveBigIntegerField(default=0)),
                ("record_hash", models.CharField(default="", max_length=64)),
            ],
        ),
        migrations.AddField("auditrecord", "sequence", models.PositiveBigIntegerField(null=True)),
        migrations.AddField("auditrecord", "previous_hash", models.CharField(default="", max_length=64)),
        migrations.AddField("auditrecord", "record_hash", models.CharField(default="", max_length=64)),
        migrations.AlterField("auditrecord", "created_at", models.DateTimeField(db_index=True)),
        migrations.RunPython(chain_existing_records, migrations.RunPython.noop),
        migrations.AlterField("auditrecord", "sequence", models.PositiveBigIntegerField(unique=True)),
        migrations.AlterField("auditrecord", "previous_hash", models.CharField(max_length=64)),
        migrations.AlterField("auditrecord", "record_hash", models.CharField(max_length=64)),
        migrations.AlterField(
            "auditrecord",
            "event",
            models.CharField(
                choices=[
                    ("agent_session_created", "Agent Session Created"),
                    ("proposal_invalid", "Proposal Invalid"),
                    ("proposal_forbidden", "Proposal Forbidden"),
                    ("proposal_refused", "Proposal Refused"),
                    ("proposed", "Proposed"),
                    ("proposal_repeated", "Proposal Repeated"),
                    ("confirmed", "Confirmed"),
                    ("declined", "Declined"),
                    ("approved", "Approved"),
                    ("rejected", "Rejected"),
                    ("decision_refused", "Decision Refused"),
                    ("execution_started", "Execution Started"),
                    ("executed", "Executed"),
                    ("execution_failed", "Execution Failed"),
                    ("superseded", "Superseded"),
                    ("expired", "Expired"),
                    ("execution_attempt_failed", "Execution Attempt Failed"),
                    ("retried", "Retried"),
                    ("agent_session_revoked", "Agent Session Revoked"),
                ],
                max_length=32,
            ),
        ),
        migrations.RunPython(install_triggers, drop_triggers),
    ]
