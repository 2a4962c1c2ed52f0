"""`/api/shop/<section>/<identity>` for every import section with a `record` hook (orders, invoices,
customers), and a JSON 404 for anything else under /api/shop/."""

from django.urls import URLPattern, path, re_path

from approvals.core.registry import registry
from approvals.site.shopdata.views import no_such_endpoint, record_view


def _patterns() -> list[URLPattern]:
    served = [section for section in registry.ordered_import_sections() if section.record is not None]
    return [
        *(path(f"{s.key}/<path:identity>", record_view(s), name=f"shop-{s.key}") for s in served),
        # [\s\S]: a path with a newline (%0A) matches no other pattern, and gets the JSON 404 too.
        re_path(r"^(?P<rest>[\s\S]*)$", no_such_endpoint),
    ]


urlpatterns = _patterns()
