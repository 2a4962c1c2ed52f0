import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

REFUND_STATUSES = [
    ("pending", "Processing at the bank"),
    ("succeeded", "Succeeded"),
    ("failed", "Failed at the bank"),
    ("canceled", "Cancelled"),
]


class Migration(migrations.Migration):

    dependencies = [
        ("refunds", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="refund",
            name="status",
            field=models.CharField(choices=REFUND_STATUSES, default="succeeded", max_length=16),
        ),
        migrations.AddField(
            model_name="refund",
            name="status_reason",
            field=models.CharField(
                blank=True, help_text="The provider's pending_reason or failure_reason, as it sent it.", max_length=255
            ),
        ),
        migrations.AddField(
            model_name="refund",
            name="status_changed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="localgatewayrefund",
            name="status",
            field=models.CharField(choices=REFUND_STATUSES, default="succeeded", max_length=16),
        ),
        migrations.AddField(
            model_name="localgatewayrefund",
            name="status_reason",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.CreateModel(
            name="ProviderEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("provider", models.CharField(max_length=16)),
                ("event_id", models.CharField(max_length=255)),
                ("type", models.CharField(max_length=64)),
                ("object_id", models.CharField(blank=True, help_text="The refund (or charge) it is about.", max_length=255)),
                ("provider_created_at", models.DateTimeField(blank=True, null=True)),
                ("payload", models.JSONField()),
                ("result", models.CharField(blank=True, help_text="What applying it did (docs/payments.md).", max_length=32)),
                ("detail", models.JSONField(default=dict)),
                ("received_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["received_at"],
                "indexes": [models.Index(fields=["object_id"], name="provider_event_object_idx")],
                "constraints": [models.UniqueConstraint(fields=("provider", "event_id"), name="provider_event_once")],
            },
        ),
        migrations.CreateModel(
            name="Drift",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("fingerprint", models.CharField(max_length=64, unique=True)),
                ("kind", models.CharField(choices=[
                    ("provider_refund_without_preview", "Provider refund with no preview"),
                    ("preview_without_provider_refund", "Preview with no provider refund"),
                    ("amount_mismatch", "Amount mismatch"),
                    ("status_mismatch", "Status mismatch"),
                    ("refunded_total_mismatch", "Refunded total disagrees"),
                ], max_length=40)),
                ("reference", models.CharField(blank=True, help_text="The refund or preview it is about.", max_length=255)),
                ("message", models.TextField()),
                ("facts", models.JSONField(default=dict)),
                ("first_seen_at", models.DateTimeField(auto_now_add=True)),
                ("last_seen_at", models.DateTimeField()),
                ("cleared_at", models.DateTimeField(blank=True, null=True)),
                ("acknowledged_at", models.DateTimeField(blank=True, null=True)),
                ("acknowledgement_note", models.TextField(blank=True)),
                ("acknowledged_by", models.ForeignKey(
                    blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name="+",
                    to=settings.AUTH_USER_MODEL,
                )),
                ("order", models.ForeignKey(
                    on_delete=django.db.models.deletion.PROTECT, related_name="drifts", to="refunds.order",
                )),
            ],
            options={
                "ordering": ["-last_seen_at", "id"],
                "indexes": [models.Index(fields=["cleared_at", "acknowledged_at"], name="drift_open_idx")],
            },
        ),
    ]
