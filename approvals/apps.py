from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals engine"

    def ready(self) -> None:
        # Imported for what they register: system checks (checks, quorum), transition listeners and tasks
        # (notifications, webhooks), and the Celery tasks the services publish by name (tasks).
        from approvals import tasks  # noqa: F401
        from approvals.agents import webhooks  # noqa: F401
        from approvals.agents.api import authentication, serializers  # noqa: F401  (register the OpenAPI extensions)
        from approvals.audit import checks as audit_checks  # noqa: F401
        from approvals.audit.cosigning import witnesses_report
        from approvals.audit.seal import seal_lag_seconds
        from approvals.console import (
            notifications,  # noqa: F401
            slack,  # noqa: F401  (the Slack review messages' listener and tasks)
        )
        from approvals.core import checks, quorum, stepup  # noqa: F401
        from approvals.core.registry import ImportSection, registry
        from approvals.core.staff_roles import staff_roles_migrate
        from approvals.operations import metrics
        from approvals.site.people import (
            CustomerImportSerializer,
            StaffImportSerializer,
            customer_record,
            customer_upsert,
            person_describe,
            staff_upsert,
        )

        registry.register_import_section(
            ImportSection(
                key="customers",
                item_serializer=CustomerImportSerializer,
                write=customer_upsert,
                order=0,
                subject_type="user",
                describe=person_describe,
                key_field="username",
                record=customer_record,
            )
        )
        registry.register_import_section(
            ImportSection(
                key="staff",
                item_serializer=StaffImportSerializer,
                write=staff_upsert,
                order=10,
                subject_type="user",
                describe=person_describe,
            )
        )

        from approvals.core.services.sessions import agent_sessions_follow_person_activity

        agent_sessions_follow_person_activity()  # deactivating a person ends their agent sessions
        # Once per migrate (and flush), on the engine's turn: the groups every registered action declares.
        post_migrate.connect(staff_roles_migrate, sender=self, dispatch_uid="approvals.staff_roles_migrate")

        metrics.count_actions(registry.actions.keys)
        metrics.measure_seal_lag(seal_lag_seconds)
        metrics.measure_witnesses(witnesses_report)  # for /metrics and /readyz
        notifications.register()  # the reviewer digest is scheduled when a preview starts waiting for staff
