import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()


def _load_before_fork() -> None:
    """Do now, once, what Django and Babel otherwise do lazily on each process's first request.

    gunicorn loads this module in its master (preload_app) and forks its workers from it, so a new or
    recycled worker starts with these in memory. Left lazy, every worker's first agent request took
    about 1.6 s: 1.4 s importing the URLconf (every view, DRF, the MCP SDK and pydantic's models),
    140 ms reading Babel's locale data, 10 ms building the URL reverse map (docs/benchmarks.md). Nothing
    here opens a connection, so nothing is shared across the fork.
    """
    from approvals.core.money import format_minor

    resolver = get_resolver()
    resolver.url_patterns  # noqa: B018  # the property imports the URLconf
    resolver.reverse_dict  # noqa: B018  # the property builds the map `reverse()` reads
    format_minor(0, "USD")


_load_before_fork()
