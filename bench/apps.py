from django.apps import AppConfig


class BenchConfig(AppConfig):
    """Installed only by bench.settings: the floor endpoint's table never reaches the application."""

    name = "bench"
    default_auto_field = "django.db.models.BigAutoField"
