from django.db import migrations, models


class Migration(migrations.Migration):
    """A preview's amount and currency become optional (an action that moves no money), and the engine
    stops declaring the actions' review permissions: refunds and invoices declare and migrate their own
    (refunds 0003, invoices 0004 move the existing grants)."""

    dependencies = [
        ("approvals", "0013_agent_session_webhooks"),
    ]

    operations = [
        migrations.AlterField(
            model_name="preview",
            name="amount_minor",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="preview",
            name="currency",
            field=models.CharField(blank=True, max_length=3, null=True),
        ),
        migrations.AddConstraint(
            model_name="preview",
            constraint=models.CheckConstraint(
                condition=models.Q(("amount_minor__isnull", True), ("currency__isnull", True))
                | models.Q(("amount_minor__isnull", False), ("currency__isnull", False)),
                name="preview_amount_with_currency",
            ),
        ),
        migrations.AlterModelOptions(
            name="preview",
            options={
                "ordering": ["created_at"],
                "permissions": [("review_preview", "Can review previews of actions without a permission of their own")],
            },
        ),
    ]
