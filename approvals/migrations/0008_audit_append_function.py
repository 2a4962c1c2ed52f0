"""On PostgreSQL, the audit append as one function: lock the chain head, stamp, link and insert the
records, move the head. Python sends the records' canonical text in parts (audit_chain.
audit_record_text_parts) and the function completes each with its time, the previous hash and its
sequence, and hashes it: the same text and the same SHA-256 as audit_record_hash, so verify_audit
checks records written either way. One call, sent with the COMMIT, holds the head for one round trip
of the server's own work instead of several of the web process's."""

from django.db import migrations

GENESIS = "0" * 64

APPEND_SQL = f"""
-- A time as Python's datetime.isoformat() writes it once read back by Django (UTC, microseconds unless 0).
CREATE OR REPLACE FUNCTION approvals_utc_isoformat(value timestamptz) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT to_char(value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN to_char(value AT TIME ZONE 'UTC', 'US') = '000000' THEN ''
                ELSE '.' || to_char(value AT TIME ZONE 'UTC', 'US') END
        || '+00:00'
$$;

CREATE OR REPLACE FUNCTION approvals_audit_append(
    p_event text[], p_action text[], p_preview uuid[], p_actor bigint[], p_agent_session bigint[],
    p_subject_type text[], p_subject_id text[], p_raw_arguments text[], p_approval_basis text[],
    p_result text[], p_text_before_time text[], p_text_before_previous text[],
    p_text_before_sequence text[], p_text_after_sequence text[]
) RETURNS TABLE (id bigint, sequence bigint, previous_hash text, record_hash text, created_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    head_sequence bigint;
    head_hash text;
    stamped timestamptz;
    stamped_text text;
    link text;
BEGIN
    -- Lock the head by updating it (not SELECT ... FOR UPDATE: inside a savepoint, locking a row the
    -- transaction already changed creates a multixact each time, and a batch of appends slows down).
    UPDATE approvals_auditchainhead h SET sequence = h.sequence WHERE h.id = 1
        RETURNING h.sequence, h.record_hash INTO head_sequence, head_hash;
    IF NOT FOUND THEN
        INSERT INTO approvals_auditchainhead (id, sequence, record_hash) VALUES (1, 0, '') ON CONFLICT DO NOTHING;
        UPDATE approvals_auditchainhead h SET sequence = h.sequence WHERE h.id = 1
            RETURNING h.sequence, h.record_hash INTO head_sequence, head_hash;
    END IF;
    link := COALESCE(NULLIF(head_hash, ''), '{GENESIS}');
    FOR i IN 1 .. COALESCE(array_length(p_event, 1), 0) LOOP
        -- Stamped under the head's lock, so that times never go backwards along the chain.
        stamped := clock_timestamp();
        stamped_text := approvals_utc_isoformat(stamped);
        head_sequence := head_sequence + 1;
        previous_hash := link;
        link := encode(sha256(convert_to(
            p_text_before_time[i] || stamped_text || p_text_before_previous[i] || previous_hash
            || p_text_before_sequence[i] || head_sequence::text || p_text_after_sequence[i], 'UTF8')), 'hex');
        INSERT INTO approvals_auditrecord AS r (
            sequence, previous_hash, record_hash, created_at, event, action, preview_id, actor_id,
            agent_session_id, subject_type, subject_id, raw_arguments, approval_basis, result
        ) VALUES (
            head_sequence, previous_hash, link, stamped, p_event[i], p_action[i], p_preview[i], p_actor[i],
            p_agent_session[i], p_subject_type[i], p_subject_id[i], p_raw_arguments[i],
            p_approval_basis[i]::jsonb, p_result[i]::jsonb
        ) RETURNING r.id INTO id;
        sequence := head_sequence;
        record_hash := link;
        created_at := stamped;
        RETURN NEXT;
    END LOOP;
    UPDATE approvals_auditchainhead h SET sequence = head_sequence, record_hash = link WHERE h.id = 1;
END;
$$;
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_SQL)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "DROP FUNCTION IF EXISTS approvals_audit_append(text[], text[], uuid[], bigint[], bigint[], text[], "
            "text[], text[], text[], text[], text[], text[], text[], text[])"
        )
        schema_editor.execute("DROP FUNCTION IF EXISTS approvals_utc_isoformat(timestamptz)")


class Migration(migrations.Migration):
    dependencies = [("approvals", "0007_drop_indexes_covered_by_composites")]

    operations = [migrations.RunPython(install, uninstall)]
