"""Migrate the e2e database; run inside the cluster's environment (DATABASE_URL set).

    python -m tests.e2e.schema migrate   # the real migrations; exit 3 when models.py has changes
                                         # that no migration covers (the cluster would run on a
                                         # stale schema and /api/health would not report it)
"""
from __future__ import annotations

import os
import sys

PENDING_EXIT_CODE = 3


def pending_model_changes() -> list[str]:
    """Descriptions of model changes not covered by a migration, e.g. ``turns: Add field x to y``."""
    from django.apps import apps
    from django.db.migrations.autodetector import MigrationAutodetector
    from django.db.migrations.loader import MigrationLoader
    from django.db.migrations.questioner import NonInteractiveMigrationQuestioner
    from django.db.migrations.state import ProjectState

    loader = MigrationLoader(None, ignore_no_migrations=True)
    detector = MigrationAutodetector(
        loader.project_state(), ProjectState.from_apps(apps), NonInteractiveMigrationQuestioner(dry_run=True)
    )
    return [
        f"{app}: {operation.describe()}"
        for app, migrations in detector.changes(graph=loader.graph).items()
        for migration in migrations
        for operation in migration.operations
    ]


def main(mode: str) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "covel.settings.hosted")
    import django

    django.setup()
    from django.core.management import call_command

    if mode == "migrate":
        pending = pending_model_changes()
        if pending:
            sys.stderr.write(
                "models.py has changes without migrations; the e2e cluster would run on a stale schema:\n  "
                + "\n  ".join(pending)
                + "\nGenerate the migrations (manage.py makemigrations) before running the e2e tests.\n"
            )
            return PENDING_EXIT_CODE
        call_command("migrate", interactive=False, verbosity=0)
        return 0
    sys.stderr.write(f"usage: python -m tests.e2e.schema migrate (got {mode!r})\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
