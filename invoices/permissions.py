"""Who may do what with invoices."""

from typing import Any

SEND_ANY_INVOICE = "invoices.send_any_invoice"
# The permission of the "Invoice approvers" group: deciding sends in the console, and so giving one in
# advance as a standing approval.
APPROVE_SENDS = "approvals.review_send_invoice"


def may_approve_sends(user: Any) -> bool:
    return bool(user.is_active) and user.has_perm(APPROVE_SENDS)
