from django.urls import path

from approvals.customers import views

app_name = "approvals"

urlpatterns = [
    path("", views.my_requests, name="mine"),
    path("<uuid:preview_id>/status", views.preview_status, name="status"),
    path("<uuid:preview_id>/", views.preview_page, name="preview"),
    path("<uuid:preview_id>/confirm", views.preview_confirm, name="confirm"),
    path("<uuid:preview_id>/decline", views.preview_decline_view, name="decline"),
]
