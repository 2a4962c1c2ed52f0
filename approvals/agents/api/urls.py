from django.http import HttpRequest, JsonResponse
from django.urls import path, re_path

from approvals.agents.api import views
from approvals.agents.api.errors import error_body
from approvals.core.errors import ErrorCode


def no_such_endpoint(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Anything else under /api/agent/ (a typo, a trailing slash): the JSON envelope, not an HTML page."""
    return JsonResponse(
        error_body(ErrorCode.NOT_FOUND, "There is no such endpoint; the agent API is described at /api/schema/."),
        status=404,
    )


urlpatterns = [
    path("tools", views.ToolListView.as_view(), name="agent-tools"),
    path("tool-calls", views.ToolCallView.as_view(), name="agent-tool-calls"),
    path("previews", views.PreviewListView.as_view(), name="agent-previews"),
    path("previews/<str:preview_id>", views.PreviewStatusView.as_view(), name="agent-preview"),
    path("previews/<str:preview_id>/withdraw", views.PreviewWithdrawView.as_view(), name="agent-preview-withdraw"),
    path("previews/<str:preview_id>/receipt", views.PreviewReceiptView.as_view(), name="agent-preview-receipt"),
    path("sessions", views.AgentSessionCreateView.as_view(), name="agent-sessions"),
    re_path(r"^(?P<rest>.*)$", no_such_endpoint),
]
