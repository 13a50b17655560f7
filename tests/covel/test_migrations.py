"""The committed migrations match the models: `make run` on a fresh machine gets the real schema."""
from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_models_have_no_unmigrated_changes():
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exc:  # --check exits non-zero when a migration is missing
        pytest.fail(f"models changed without a migration:\n{out.getvalue()}") if exc.code else None
    assert "No changes detected" in out.getvalue()
