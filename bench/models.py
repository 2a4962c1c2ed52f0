from django.db import models


class FloorCall(models.Model):
    """The one row the floor endpoint writes per call: who called, which tool, the parsed arguments."""

    agent_session = models.ForeignKey("approvals.AgentSession", on_delete=models.CASCADE, related_name="+")
    tool_name = models.CharField(max_length=64)
    arguments = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.tool_name} by session {self.agent_session_id}"
