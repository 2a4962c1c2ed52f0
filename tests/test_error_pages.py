"""The app's own 404 and 500 pages (never Django's debug pages) and its favicon."""

import pytest
from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path

from config import urls as app_urls


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug the customer must not read about: secret-internal-detail")


urlpatterns = [path("boom/", boom), *app_urls.urlpatterns]


@override_settings(DEBUG=False)
def test_a_missing_page_is_the_apps_404(db, alice):
    client = Client()
    anonymous = client.get("/no-such-page/")
    assert anonymous.status_code == 404
    body = anonymous.content.decode()
    assert "<h1>Page not found</h1>" in body and 'href="/accounts/login/"' in body
    assert "URLconf" not in body and "console/" not in body
    client.force_login(alice)
    known = client.get("/previews/00000000-0000-0000-0000-000000000000/")
    assert known.status_code == 404
    assert "<h1>Page not found</h1>" in known.content.decode()
    assert "Log out alice" in known.content.decode()  # the site's own frame, with its navigation


@pytest.mark.urls(__name__)
@override_settings(DEBUG=False)
def test_a_server_error_is_the_apps_500_without_the_request_context(db, alice):
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    response = client.get("/boom/")
    assert response.status_code == 500
    body = response.content.decode()
    assert "<h1>Something went wrong</h1>" in body
    assert "secret-internal-detail" not in body and "Traceback" not in body and "alice" not in body
    assert 'rel="icon"' in body and "/static/css/app.css" in body


def test_the_favicon_is_linked_and_served(db, alice):
    client = Client()
    client.force_login(alice)
    page = client.get("/previews/").content.decode()
    assert '<link rel="icon" href="/static/favicon.ico"' in page
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.ico"
    # The file is the app's own (served by WhiteNoise: tests/test_settings_fail_closed.py fetches it).
    found = finders.find("favicon.ico")
    assert found and open(found, "rb").read(4) == b"\x00\x00\x01\x00"
