"""Trigram indexes for the console's search: a part of the subject (an order or invoice number) and of the
customer's username or email (approvals.core.search_indexes). PostgreSQL only; built concurrently."""

from django.conf import settings
from django.db import migrations

from approvals.core.search_indexes import TrigramSearchIndex, column_expression


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0022_preview_withdrawn"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        TrigramSearchIndex("preview_subject_id_trgm", "approvals.Preview", column_expression("subject_id")),
        TrigramSearchIndex("user_username_trgm", settings.AUTH_USER_MODEL, column_expression("username")),
        TrigramSearchIndex("user_email_trgm", settings.AUTH_USER_MODEL, column_expression("email")),
    ]
