import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [("approvals", "0005_preview_execution_started_at")]

    operations = [
        migrations.CreateModel(
            name="FloorCall",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("tool_name", models.CharField(max_length=64)),
                ("arguments", models.JSONField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "agent_session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="approvals.agentsession"
                    ),
                ),
            ],
        ),
    ]
