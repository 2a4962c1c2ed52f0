"""Who may do what with refunds: the staff role refund_order declares (created by migration 0003)."""

from typing import Any

from approvals.plugin import EXPORT_AUDIT_PERMISSION, StaffRole

# Deciding refund previews in the console, and the console's payments page. Declared on Order.Meta.
REVIEW_REFUNDS = "refunds.review_refund_order"
REFUND_REVIEWERS = "Refund reviewers"
STAFF_ROLES = (StaffRole(REFUND_REVIEWERS, (REVIEW_REFUNDS, EXPORT_AUDIT_PERMISSION)),)


def may_see_payments(user: Any) -> bool:
    """The console's payments page: active staff who decide refunds."""
    return bool(user.is_authenticated and user.is_active and user.is_staff and user.has_perm(REVIEW_REFUNDS))
