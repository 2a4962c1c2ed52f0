"""config.wsgi does at import what each gunicorn worker would otherwise do on its first request, so that the
master (preload_app) does it once before forking: import the URLconf and read Babel's locale data."""

import json
import os
import subprocess
import sys

from tests.workers import ROOT

PROBE = """
import json, sys
import babel.localedata
import config.wsgi
print(json.dumps({
    "urlconf": "config.urls" in sys.modules,
    "mcp": "approvals.agents.mcp_server" in sys.modules,
    "api_views": "approvals.agents.api.views" in sys.modules,
    "babel_locales": sorted(babel.localedata._cache),  # Babel's per-process cache of parsed locale files
}))
"""


def _probe(code: str) -> dict:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "SECRET_KEY": "test-only-secret-key-not-for-any-deployment-0123456789",
        "REDIS_URL": "",
    }
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_loading_the_wsgi_application_imports_the_urlconf_and_reads_the_display_locale():
    loaded = _probe(PROBE)
    assert loaded["urlconf"] and loaded["mcp"] and loaded["api_views"]
    assert "en_US" in loaded["babel_locales"]


def test_without_the_wsgi_module_django_leaves_them_to_the_first_request():
    """The control: Django's own application loader imports neither, so the test above can fail."""
    loaded = _probe(PROBE.replace("import config.wsgi", "import django; django.setup()"))
    assert not loaded["urlconf"] and not loaded["mcp"]
    assert "en_US" not in loaded["babel_locales"]
