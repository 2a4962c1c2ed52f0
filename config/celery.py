import logging
import logging.config
import os
import time
from typing import Any

from celery import Celery, Task
from celery.signals import (
    before_task_publish,
    setup_logging,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_shutdown,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# The message header that carries the publisher's log context (request id, preview, agent session, action).
LOG_CONTEXT_HEADER = "log_context"
# Tasks whose first argument is a preview id.
PREVIEW_TASKS = frozenset({"approvals.execute_preview"})


@task_prerun.connect
@task_postrun.connect
def close_old_connections(task: Task | None = None, **kwargs: Any) -> None:
    """Around each task, as Django does around each request: drop a database connection that is past
    CONN_MAX_AGE or broken, keep a healthy one (settings.CELERY_DB_REUSE_MAX stops Celery's own
    close-after-every-task). Eager tasks run inside the caller's transaction: leave it alone."""
    if task is not None and getattr(task.request, "is_eager", False):
        return
    from django.db import close_old_connections as django_close_old_connections

    django_close_old_connections()


@setup_logging.connect
def configure_logging(loglevel: str | int | None = None, **kwargs: Any) -> None:
    """The worker and beat log as the web does (settings.LOGGING: LOG_FORMAT, the context, the
    scrubbing) instead of Celery's own format; `--loglevel` still sets the level."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)


@before_task_publish.connect
def send_log_context(headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
    from approvals.operations import logs

    context = logs.current()
    if headers is not None and context:
        headers[LOG_CONTEXT_HEADER] = dict(context)


# The message header that says when it was published: /readyz reads it off the oldest waiting message.
PUBLISHED_AT_HEADER = "published_at"


@before_task_publish.connect
def stamp_published_at(headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
    if headers is not None:
        headers[PUBLISHED_AT_HEADER] = time.time()


@task_prerun.connect
def bind_log_context(
    task: Task, args: tuple[Any, ...] | None = None, kwargs: dict[str, Any] | None = None, **extra: Any
) -> None:
    """The publisher's context (its request id), else the task's id as the request id; and the
    preview of a preview task. An eager task runs in its caller's context and adds to it."""
    from approvals.operations import logs

    request = task.request
    if getattr(request, "is_eager", False):
        context = dict(logs.current())
    else:
        context = getattr(request, LOG_CONTEXT_HEADER, None) or {}
        context = dict(context) if isinstance(context, dict) else {}
        context.setdefault("request_id", request.id or "")
    if task.name in PREVIEW_TASKS:
        preview_id = (kwargs or {}).get("preview_id") or (args[0] if args else None)
        if preview_id and context.get("preview_id") != str(preview_id):
            # Another preview's context (a sweeper dispatching many): keep only the request id.
            context = {"request_id": context.get("request_id", ""), "preview_id": str(preview_id)}
    request._log_context_token = logs.replace(context)  # type: ignore[attr-defined]  # read by unbind_log_context


@task_postrun.connect
def unbind_log_context(task: Task, **extra: Any) -> None:
    from approvals.operations import logs

    token = getattr(task.request, "_log_context_token", None)
    if token is not None:
        logs.reset(token)


@worker_init.connect
def start_metrics_exporter(**kwargs: Any) -> None:
    """With CELERY_METRICS_PORT (and METRICS_TOKEN) set, the worker's main process serves /metrics:
    the counters of all its pool processes, added up from PROMETHEUS_MULTIPROC_DIR."""
    from django.conf import settings

    if not settings.CELERY_METRICS_PORT:
        return
    if not settings.METRICS_TOKEN:
        logging.getLogger(__name__).warning("CELERY_METRICS_PORT is set but METRICS_TOKEN is not: no exporter")
        return
    from approvals.operations.metrics import start_exporter

    start_exporter(settings.CELERY_METRICS_ADDR, settings.CELERY_METRICS_PORT)


@worker_process_shutdown.connect
def mark_metrics_process_dead(pid: int | None = None, **kwargs: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())
