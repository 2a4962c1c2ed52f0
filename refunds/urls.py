from django.urls import path

from . import views

app_name = "refunds"

urlpatterns = [path("", views.order_list, name="orders")]
