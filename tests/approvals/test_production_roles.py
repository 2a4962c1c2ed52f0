"""The documented production setup: migrations run as the tables' owner, the application as a role that
owns nothing and may only INSERT and SELECT on the audit tables. As that role the whole path works
(propose, seal, receipt), and disabling the triggers, deleting, updating or truncating audit rows fails."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from approvals.models import AuditLeaf, AuditRecord
from tests.conftest import propose

pytestmark = pytest.mark.postgres

APP_ROLE = "approval_gateway_app_ci"


@pytest.fixture
def as_app_role(db):
    """Create the role (inside the test's transaction: rolled back with it, so the test is idempotent),
    grant as the owner, and act as the role."""
    with connection.cursor() as cursor:
        cursor.execute(f"DO $$ BEGIN CREATE ROLE {APP_ROLE} NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    out = StringIO()
    call_command("grant_app_role", APP_ROLE, stdout=out)
    assert "INSERT and SELECT only on the audit log" in out.getvalue()
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {APP_ROLE}")
        cursor.execute("SELECT current_user")
        assert cursor.fetchone()[0] == APP_ROLE
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET ROLE")


def test_the_application_works_as_a_role_with_insert_and_select_on_the_audit_log(alice_agent, o12, as_app_role):
    response = propose(alice_agent, order_id="o-12", amount_minor=500, reason="damaged")
    assert response.status_code == 201, response.json()
    preview_id = response.json()["preview"]["id"]
    receipt = alice_agent.get(f"/api/agent/previews/{preview_id}/receipt")  # seals, as this role
    assert receipt.status_code == 200 and len(receipt.json()["records"]) == 1
    assert AuditLeaf.objects.count() == AuditRecord.objects.count() > 0
    response = propose(alice_agent, order_id="o-12", amount_minor=400, reason="damaged")
    second = alice_agent.get(f"/api/agent/previews/{response.json()['preview']['id']}/receipt")  # a tile grows
    assert second.status_code == 200 and second.json()["tree_head"]["size"] == AuditLeaf.objects.count() > 1

    refused = [
        ("DELETE FROM approvals_auditrecord", "permission denied"),
        ("UPDATE approvals_auditrecord SET raw_arguments = ''", "permission denied"),
        ("TRUNCATE approvals_auditrecord CASCADE", "permission denied"),
        ("DELETE FROM approvals_auditleaf", "permission denied"),
        ("UPDATE approvals_audittreehead SET root_hash = ''", "permission denied"),
        ("DELETE FROM approvals_audittreehead", "permission denied"),
        ("DELETE FROM approvals_audittile", "permission denied"),
        ("TRUNCATE approvals_audittile", "permission denied"),
        ("UPDATE approvals_audittile SET hashes = ''", "only grows at its right edge"),
        ("UPDATE approvals_auditcosignature SET line = ''", "permission denied"),
        ("ALTER TABLE approvals_auditrecord DISABLE TRIGGER ALL", "must be owner"),
        ("ALTER TABLE approvals_auditleaf DISABLE TRIGGER approvals_auditleaf_append_only", "must be owner"),
        ("SET session_replication_role = replica", "permission denied"),
        ("DROP TRIGGER approvals_auditrecord_no_truncate ON approvals_auditrecord", "must be owner"),
    ]
    for statement, error in refused:
        with pytest.raises(DatabaseError, match=error), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)
    assert AuditLeaf.objects.count() == AuditRecord.objects.count() > 0


def test_the_grant_command_refuses_a_superuser_or_a_missing_role(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="superuser"):
        call_command("grant_app_role", connection.settings_dict["USER"] or "postgres", stdout=StringIO())
    with pytest.raises(CommandError, match="No role"):
        call_command("grant_app_role", "no_such_role_for_the_gateway", stdout=StringIO())
