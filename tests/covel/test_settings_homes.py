"""The test settings' throw-away COVEL_HOME (covel-test-home-*) is removed when the process that
made it exits, in both halves (issue 23: the hosted half left them behind)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", ["covel.settings.test", "covel.settings.test_hosted"])
def test_the_temporary_home_is_removed_at_exit(module):
    script = ("import django; django.setup(); from django.conf import settings; "
              "import os; assert os.path.isdir(settings.COVEL_HOME); print(settings.COVEL_HOME)")
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PROMETHEUS_MULTIPROC_DIR")}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**env, "DJANGO_SETTINGS_MODULE": module},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    home = Path(done.stdout.strip().splitlines()[-1])
    assert home.name.startswith("covel-test-home-") and not home.exists()
