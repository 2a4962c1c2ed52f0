from django.apps import AppConfig


class ToyActionConfig(AppConfig):
    name = "tests.toy_action"
    label = "toy_action"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from approvals.plugin import register_action

        from .actions import RenameBoardAction

        register_action(RenameBoardAction())
