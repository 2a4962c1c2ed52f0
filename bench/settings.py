"""The benchmark's settings: the production settings (config.settings, from the environment) plus the
floor endpoint, which lives only here. Nothing else changes, so the floor and the real pipeline run in
the same server with the same middleware, database and cache configuration."""

from config.settings import *  # noqa: F403
from config.settings import CELERY_TASK_ROUTES, INSTALLED_APPS, env

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]
ROOT_URLCONF = "bench.urls"

# A run of its own on a shared Redis: its own task queues and cache keys, so that a test suite using
# the same Redis at the same time neither takes the benchmark's tasks nor sees its throttle counters.
BENCH_RUN_ID = env.str("BENCH_RUN_ID", default="bench")
CELERY_TASK_DEFAULT_QUEUE = f"{BENCH_RUN_ID}-executions"
CELERY_TASK_ROUTES = {task: {"queue": f"{BENCH_RUN_ID}-{route['queue']}"} for task, route in CELERY_TASK_ROUTES.items()}
CACHES["default"]["KEY_PREFIX"] = BENCH_RUN_ID  # noqa: F405
