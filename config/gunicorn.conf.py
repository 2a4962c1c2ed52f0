"""Gunicorn in production: `gunicorn -c config/gunicorn.conf.py config.wsgi:application`.

Every value comes from the environment, with defaults measured by `make bench` (docs/benchmarks.md).
Run it behind a proxy or load balancer that terminates TLS (and then set HTTPS=true).
"""

import gc
import multiprocessing
import os
from typing import Any  # gunicorn ships no types: its server and worker objects are Any here


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


bind = os.environ.get("GUNICORN_BIND") or f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"

# 2 × cores + 1 processes of two threads each. Each request's Python work holds its process's GIL, so
# more threads in one process only queue behind each other (`make bench` measured sync 5 processes ahead
# of gthread 3 × 4 and 2 × 8 on two cores, docs/benchmarks.md), while an extra process per core keeps
# the cores busy during database round trips. The second thread is for the agents' long-polls
# (`?wait=`), which sleep: at most half a process's threads wait (AGENT_PREVIEW_WAITS_MAX), so every
# process always has a thread for pages and proposals. Needs a proxy in front that buffers slow clients
# (any load balancer or nginx does).
workers = _int("WEB_CONCURRENCY", 2 * multiprocessing.cpu_count() + 1)
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
threads = _int("GUNICORN_THREADS", 2)
# The application (loaded after this file, preload_app) sizes its per-process wait limit from it.
os.environ["GUNICORN_THREADS"] = str(threads)

# Keep-alive (gthread only) for the load balancer's connections; a request that takes longer than
# `timeout` is killed (its transaction rolls back); workers are recycled now and then to bound memory.
keepalive = _int("GUNICORN_KEEPALIVE", 5)
timeout = _int("GUNICORN_TIMEOUT", 30)
graceful_timeout = _int("GUNICORN_GRACEFUL_TIMEOUT", 30)
max_requests = _int("GUNICORN_MAX_REQUESTS", 10000)
max_requests_jitter = _int("GUNICORN_MAX_REQUESTS_JITTER", 1000)
backlog = _int("GUNICORN_BACKLOG", 2048)

# Load Django once in the master, then fork: faster starts, shared memory. Database connections are
# opened lazily by each worker after the fork, never inherited.
preload_app = True


def when_ready(server: Any) -> None:
    """Before the workers are forked: the loaded application's objects (about 100,000) live as long as
    the workers, so keep them out of the garbage collector's full passes, which otherwise scan them all
    (about 22 ms, landing on whichever request triggers it) and touch every shared page."""
    gc.freeze()


def child_exit(server: Any, worker: Any) -> None:
    """Prometheus multiprocess mode (PROMETHEUS_MULTIPROC_DIR, docs/operations.md): a worker that exited
    keeps its counters in the directory, but its live gauges must stop counting."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


# Request lines and bodies are bounded by Django (DATA_UPLOAD_MAX_MEMORY_SIZE) and by these.
limit_request_line = 4094
limit_request_fields = 100

# Logs to stdout/stderr for the process supervisor; the access log is off unless asked for. Its lines
# carry the request id the application echoes (X-Request-ID), to join them with the application's logs.
accesslog = os.environ.get("GUNICORN_ACCESSLOG") or None
access_log_format = os.environ.get(
    "GUNICORN_ACCESS_LOG_FORMAT", '%(h)s "%(r)s" %(s)s %(b)s %(M)sms request_id=%({x-request-id}o)s'
)
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOGLEVEL", "info")
# Behind a proxy: trust X-Forwarded-* from these addresses only.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
proc_name = "approval-gateway"

# gunicorn ≥ 25.1 opens a control socket (for gunicornc) at one path per user, which two servers of the
# same user would share. Off unless GUNICORN_CONTROL_SOCKET names a path.
control_socket_disable = not os.environ.get("GUNICORN_CONTROL_SOCKET")
if not control_socket_disable:
    control_socket = os.environ["GUNICORN_CONTROL_SOCKET"]
