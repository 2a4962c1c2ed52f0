"""The console finds invoice sends by a part of their recipient (`SendInvoice.searchable_payload_fields`):
a trigram index over that payload field of the engine's previews (approvals.core.search_indexes).
PostgreSQL only; built concurrently."""

from django.db import migrations

from approvals.plugin import TrigramSearchIndex, payload_field_expression


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("invoices", "0004_review_roles"),
        ("approvals", "0023_console_search_trigram"),
    ]

    operations = [
        TrigramSearchIndex("preview_recipient_trgm", "approvals.Preview", payload_field_expression("recipient")),
    ]
