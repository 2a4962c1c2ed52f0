"""The production setup's second database role (docs/audit.md, README): run as the owner of the tables
(the role migrations run as) after every `migrate`. The application's role may read and write every
table but the audit log's, where it may only INSERT and SELECT (and UPDATE the hash tiles, which a
trigger lets grow at their right edge only); it owns nothing, so it can neither disable the audit
triggers nor TRUNCATE."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from approvals.models import AuditCosignature, AuditLeaf, AuditRecord, AuditTile, AuditTreeHead

AUDIT_MODELS = (AuditRecord, AuditLeaf, AuditTreeHead, AuditCosignature, AuditTile)


def app_role_grants(role: str, schema: str) -> list[str]:
    quote = connection.ops.quote_name
    grantee, namespace = quote(role), quote(schema)
    audit_tables = ", ".join(f"{namespace}.{quote(model._meta.db_table)}" for model in AUDIT_MODELS)
    return [
        f"GRANT USAGE ON SCHEMA {namespace} TO {grantee}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {namespace} TO {grantee}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {namespace} TO {grantee}",
        f"REVOKE ALL ON {audit_tables} FROM {grantee}",
        f"REVOKE ALL ON {audit_tables} FROM PUBLIC",
        f"GRANT SELECT, INSERT ON {audit_tables} TO {grantee}",
        # The sealer appends to each level's right-edge tile; the trigger refuses any other change.
        f"GRANT UPDATE ON {namespace}.{quote(AuditTile._meta.db_table)} TO {grantee}",
    ]


class Command(BaseCommand):
    help = (
        "Grant the application's database role what it needs and no more: INSERT and SELECT only on the "
        "audit tables. Run as the tables' owner after every migrate (PostgreSQL)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("role", help="The role the application connects as (it must not own the tables).")

    def handle(self, *args: Any, role: str, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("Database roles are a PostgreSQL setup.")
        with connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", [role])
            found = cursor.fetchone()
            if found is None:
                raise CommandError(f"No role {role}: create it first (CREATE ROLE {role} LOGIN PASSWORD '…').")
            if found[0]:
                raise CommandError(f"{role} is a superuser: it could switch the audit triggers off.")
            cursor.execute(
                "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = %s::regclass",
                [AuditRecord._meta.db_table],
            )
            if cursor.fetchone()[0] == role:
                raise CommandError(f"{role} owns the audit tables: run migrations as another role (the owner).")
            cursor.execute("SELECT current_schema()")
            schema = cursor.fetchone()[0]
        with transaction.atomic(), connection.cursor() as cursor:
            for statement in app_role_grants(role, schema):
                cursor.execute(statement)
        self.stdout.write(
            f"{role}: read and write on the application's tables, INSERT and SELECT only on the audit log."
        )
