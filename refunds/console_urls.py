from django.urls import path

from . import console_views

app_name = "payments_console"

urlpatterns = [
    path("", console_views.reconciliation, name="reconciliation"),
    path("reconcile", console_views.reconcile_now, name="reconcile"),
    path("new-refund", console_views.new_refund, name="new_refund"),
    path("drifts/<int:drift_id>/acknowledge", console_views.drift_acknowledge_view, name="acknowledge"),
    path("refunds/<int:refund_id>/propose-again", console_views.refund_propose_again_view, name="propose_again"),
]
