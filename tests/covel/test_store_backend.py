"""STORE_BACKEND (spec 004 §存储后端, §关键环境变量): which settings shape it selects, and what a
process started with it really runs on."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from covel.settings import default_settings_module

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("env, module", [
    ({}, "covel.settings.embedded"),
    ({"STORE_BACKEND": "sqlite"}, "covel.settings.embedded"),
    ({"STORE_BACKEND": "memory"}, "covel.settings.embedded"),
    ({"STORE_BACKEND": "pg"}, "covel.settings.hosted"),
    ({"DATABASE_URL": "postgres://u@127.0.0.1/db"}, "covel.settings.hosted"),
    ({"DATABASE_URL": "postgres://u@127.0.0.1/db", "STORE_BACKEND": "sqlite"}, "covel.settings.embedded"),
])
def test_store_backend_selects_the_settings_shape(monkeypatch, env, module):
    monkeypatch.delenv("STORE_BACKEND", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert default_settings_module() == module


def _start(tmp_path, **env) -> subprocess.CompletedProcess:
    script = ("import os; from covel.settings import default_settings_module; "
              "os.environ.setdefault('DJANGO_SETTINGS_MODULE', default_settings_module()); "
              "import django; django.setup(); from django.conf import settings; from covel.memory_store import "
              "memory_store_open; memory_store_open(); from sessions.models import Session; "
              "print(settings.STORE_BACKEND, settings.DATABASES['default']['NAME'], Session.objects.count())")
    base = {k: v for k, v in os.environ.items()
            if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "STORE_BACKEND", "PROMETHEUS_MULTIPROC_DIR")}
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
                          env={**base, "COVEL_HOME": str(tmp_path), **env})


def test_memory_store_is_migrated_in_process_memory(tmp_path):
    done = _start(tmp_path, STORE_BACKEND="memory")
    assert done.returncode == 0, done.stderr[-2000:]
    backend, name, count = done.stdout.split()
    assert (backend, count) == ("memory", "0") and name.endswith("?vfs=memdb")
    assert not (tmp_path / "data" / "covel.db").exists()


@pytest.mark.parametrize("value, message", [("pg", "STORE_BACKEND=pg needs DATABASE_URL"),
                                            ("mongo", "STORE_BACKEND must be one of")])
def test_bad_store_backend_refuses_to_start(tmp_path, value, message):
    done = _start(tmp_path, STORE_BACKEND=value, DJANGO_SETTINGS_MODULE="covel.settings.embedded")
    assert done.returncode != 0 and message in done.stderr


def test_memory_store_with_a_host_allow_list_refuses_to_start(tmp_path):
    # the browser-private profile answers every Host (spec 004 §生产 MemoryStore 例外)
    done = _start(tmp_path, STORE_BACKEND="memory", COVEL_ALLOWED_HOSTS="play.example.org",
                  DJANGO_SETTINGS_MODULE="covel.settings.embedded")
    assert done.returncode != 0 and "COVEL_ALLOWED_HOSTS cannot be set with STORE_BACKEND=memory" in done.stderr
