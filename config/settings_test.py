"""The test override: fast hashing, eager Celery unless a test starts a real worker."""

import os

# The settings refuse to start without a key; the tests (and the workers and servers they start,
# which inherit this environment) use a throwaway one.
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-any-deployment-0123456789")

from .settings import *  # noqa: E402, F403
from .settings import env  # noqa: E402

# A throwaway key for signing the audit's tree heads (never used anywhere else).
AUDIT_SIGNING_KEY = "dGVzdC1vbmx5LWF1ZGl0LWtleS1ub3QtZm9yLXVzZSE="
AUDIT_CHECKPOINT_FILE = ""
AUDIT_CHECKPOINT_WEBHOOKS = []
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
CELERY_BROKER_URL = env.str("REDIS_URL", default="memory://")
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
AGENT_THROTTLE_RATE = "10000/min"
AGENT_USER_THROTTLE_RATE = "10000/min"
SHOP_THROTTLE_RATE = "10000/min"
AGENT_SESSIONS_PER_USER_MAX = 1000
# Throttle and login-failure counters must not outlive a test run (REDIS_URL may be set).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# The admin's own tests use it; tests/test_login_throttle.py checks that it can be left out.
ADMIN_ENABLED = True
# The long-poll's cap: schemathesis asks for long waits; the long-poll tests raise it.
AGENT_PREVIEW_WAIT_MAX_SECONDS = 1
AGENT_PREVIEW_WAIT_POLL_SECONDS = 0.1
AGENT_WEBHOOK_ALLOW_PRIVATE = True  # the tests' receivers listen on 127.0.0.1
AGENT_WEBHOOK_BACKOFF_SECONDS = 0.2

# A test-only action with no money (tests/toy_action/), on which the engine's own tests run (tests/engine/).
INSTALLED_APPS = [*INSTALLED_APPS, "tests.toy_action"]  # noqa: F405
# Each request of the live test server closes its database connection when it ends, as runserver's do.
# A kept one outlived its request on an idle keep-alive socket (a client that never closed) and kept
# PostgreSQL from dropping the test database. (Subprocess servers and workers read config.settings.)
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
