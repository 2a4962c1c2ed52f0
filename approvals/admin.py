"""Django admin for the engine's records. Previews, approvals and audit records are read-only
(no add, change, delete or bulk actions), so the admin can never edit or execute an approved action;
decisions go through the console and its services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from approvals.core.admin_bases import ReadOnlyInline, ReadOnlyModelAdmin
from approvals.models import AgentSession, Approval, AuditRecord, IdempotencyRecord, Preview, RejectedCallTally


class ApprovalInline(ReadOnlyInline):
    model = Approval
    fields = ("role", "approver", "digest", "subject_version", "basis", "created_at")


@admin.register(Preview)
class PreviewAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "action", "subject_id", "actor", "amount_minor", "currency", "status", "created_at")
    list_filter = ("status", "action", "currency")
    search_fields = ("=id", "subject_id", "actor__username")
    list_select_related = ("actor",)
    date_hierarchy = "created_at"
    inlines = [ApprovalInline]


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyModelAdmin):
    list_display = ("preview", "role", "approver", "created_at")
    list_filter = ("role",)
    list_select_related = ("preview", "approver")
    search_fields = ("=preview__id", "approver__username")


@admin.register(AuditRecord)
class AuditRecordAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "created_at", "event", "action", "subject_id", "actor", "preview")
    list_filter = ("event", "action")
    search_fields = ("subject_id", "actor__username", "=preview__id")
    list_select_related = ("actor", "preview")
    date_hierarchy = "created_at"


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyModelAdmin):
    list_display = ("key", "agent_session", "response_status", "created_at")


@admin.register(AgentSession)
class AgentSessionAdmin(admin.ModelAdmin):
    """Tokens are minted by `create_agent_session` (shown once, stored hashed) and revoked, with an
    audit record, in the console or by `revoke_agent_session`; the admin may only relabel a session."""

    actions = None
    list_display = ("token_prefix", "user", "label", "created_at", "expires_at", "revoked_at")
    list_select_related = ("user",)
    search_fields = ("token_prefix", "user__username", "label")
    readonly_fields = ("token_prefix", "user", "tools", "created_at", "expires_at", "revoked_at")
    exclude = ("token_hash",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(RejectedCallTally)
class RejectedCallTallyAdmin(ReadOnlyModelAdmin):
    list_display = ("minute", "agent_session", "kind", "count", "last_code")
    list_filter = ("kind",)
    date_hierarchy = "minute"
    ordering = ("-minute",)
