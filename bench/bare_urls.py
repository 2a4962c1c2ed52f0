from django.urls import path

from .bare import BareToolCallView

urlpatterns = [path("bench/bare/tool-calls", BareToolCallView.as_view(), name="bench-bare")]
