"""The test override: fast hashing, eager Celery unless a test starts a real worker."""

from .settings import *  # noqa: F403
from .settings import env

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
CELERY_BROKER_URL = env.str("REDIS_URL", default="memory://")
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
AGENT_THROTTLE_RATE = "10000/min"
# Throttle and login-failure counters must not outlive a test run (REDIS_URL may be set).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
