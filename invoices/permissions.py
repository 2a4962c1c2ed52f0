"""Who may do what with invoices: the staff roles send_invoice declares (created by migration 0004)."""

from typing import Any

from approvals.plugin import EXPORT_AUDIT_PERMISSION, StaffRole

SEND_ANY_INVOICE = "invoices.send_any_invoice"
# The permission of the "Invoice approvers" group: deciding sends in the console, and so giving one in
# advance as a standing approval. Declared on Invoice.Meta.
APPROVE_SENDS = "invoices.review_send_invoice"
INVOICE_APPROVERS = "Invoice approvers"
BILLING = "Billing"
STAFF_ROLES = (
    StaffRole(INVOICE_APPROVERS, (APPROVE_SENDS, EXPORT_AUDIT_PERMISSION)),
    # Billing staff may have any invoice sent through their own agent session (not only their own).
    StaffRole(BILLING, (SEND_ANY_INVOICE,)),
)


def may_approve_sends(user: Any) -> bool:
    return bool(user.is_active) and user.has_perm(APPROVE_SENDS)
