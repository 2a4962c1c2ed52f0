from django.urls import path

from . import views

urlpatterns = [
    path("tools", views.ToolListView.as_view(), name="agent-tools"),
    path("tool-calls", views.ToolCallView.as_view(), name="agent-tool-calls"),
    path("previews/<str:preview_id>", views.PreviewStatusView.as_view(), name="agent-preview"),
    path("sessions", views.AgentSessionCreateView.as_view(), name="agent-sessions"),
]
