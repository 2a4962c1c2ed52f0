from django.conf import settings
from django.db import models

REVIEW_PERMISSION_CODENAME = "review_rename_board"


class Board(models.Model):
    """The subject of `rename_board`: an id people see, its owner, and a version raised on every change."""

    id = models.CharField(primary_key=True, max_length=64)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    title = models.CharField(max_length=100)
    archived = models.BooleanField(default=False)
    version = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["id"]
        permissions = [(REVIEW_PERMISSION_CODENAME, "Can approve and reject board renames")]

    def __str__(self) -> str:
        return f"board {self.id}"
