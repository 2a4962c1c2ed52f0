"""The application's URLs plus the floor endpoint, served by the same gunicorn as the pipeline."""

from django.urls import path

from config.urls import urlpatterns as application_urlpatterns

from .floor import floor_tool_call

urlpatterns = [
    path("bench/floor/tool-calls", floor_tool_call, name="bench-floor"),
    *application_urlpatterns,
]
