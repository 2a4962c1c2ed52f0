import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def close_old_connections(task=None, **kwargs) -> None:  # type: ignore[no-untyped-def]
    """Around each task, as Django does around each request: drop a database connection that is past
    CONN_MAX_AGE or broken, keep a healthy one (settings.CELERY_DB_REUSE_MAX stops Celery's own
    close-after-every-task). Eager tasks run inside the caller's transaction: leave it alone."""
    if task is not None and getattr(task.request, "is_eager", False):
        return
    from django.db import close_old_connections as django_close_old_connections

    django_close_old_connections()
