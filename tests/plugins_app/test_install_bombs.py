"""Hostile archives through the HTTP routes (issue: a 1.5 MB zip with false sizes drove RSS to
2.25 GB): each is refused with the envelope, memory grows by less than a stated bound, and nothing
is left in COVEL_HOME. Run in a fresh interpreter so ru_maxrss measures this request alone."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugins_app.test_archives import _zip, lying_zip

REPO = Path(__file__).resolve().parents[2]
RSS_BOUND_MIB = 48

SCRIPT = r"""
import json, os, resource, sys
sys.path.insert(0, sys.argv[3])
os.environ["DJANGO_SETTINGS_MODULE"] = "covel.settings.embedded"
import django
django.setup()
from django.core.management import call_command
from django.test import Client
from django.core.files.uploadedfile import SimpleUploadedFile
call_command("migrate", verbosity=0)
client = Client(HTTP_HOST="127.0.0.1")
data = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
response = client.post(sys.argv[2], {"file": SimpleUploadedFile("bomb.zip", data, content_type="application/zip")})
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"status": response.status_code, "body": response.json(), "grownKiB": grown}))
"""


MIGRATE_SCRIPT = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
os.environ["DJANGO_SETTINGS_MODULE"] = "covel.settings.embedded"
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
"""


@pytest.fixture(scope="module")
def migrated_data(tmp_path_factory) -> Path:
    """A migrated embedded database folder (``COVEL_HOME/data``), made once for the module: each
    fresh server process starts from a copy, so its ``migrate`` has nothing left to apply (the
    migrations ran ~3 s per process) and its memory is measured around the request only."""
    home = tmp_path_factory.mktemp("bomb-template")
    done = subprocess.run([sys.executable, "-c", MIGRATE_SCRIPT, str(REPO)], capture_output=True, text=True,
                          timeout=300, env={"COVEL_HOME": str(home), "PATH": "/usr/bin:/bin"}, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return home / "data"


@pytest.mark.parametrize("route", ["/api/install/validate/world", "/api/install/world", "/api/install/plugin"])
@pytest.mark.parametrize("kind", ["ratio", "lying"])
def test_bombs_are_refused_with_flat_memory(tmp_path, route, kind, migrated_data):
    # given a 150 MiB member compressed to ~150 KiB, once honest (ratio) and once declaring 900 bytes
    name = "PLUGIN.md" if route.endswith("plugin") else "world.yaml"
    inflated = 150 * 1024 * 1024
    data = _zip({name: b"\0" * inflated}) if kind == "ratio" else lying_zip(inflated, 900).replace(
        b"world.yaml", name.encode().ljust(10, b"_")[:10])
    bomb = tmp_path / "bomb.zip"
    bomb.write_bytes(data)
    home = tmp_path / "home"
    shutil.copytree(migrated_data, home / "data")
    # when it is uploaded to the route in a fresh server process
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(bomb), route, str(REPO)], capture_output=True, text=True,
                          timeout=300, env={"COVEL_HOME": str(home), "PATH": "/usr/bin:/bin"}, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # then it is refused in the envelope, memory stays within the bound, and nothing is installed
    assert result["status"] in (200, 400, 413), result
    if route.endswith("/validate/world"):
        assert result["status"] == 200 and result["body"]["ok"] is False
        assert {i["code"] for i in result["body"]["issues"]} & {"zip-too-large", "zip-invalid"}
    else:
        assert result["body"]["code"] in ("payload_too_large", "package_invalid"), result["body"]
    assert result["grownKiB"] < RSS_BOUND_MIB * 1024, f"RSS grew {result['grownKiB'] // 1024} MiB"
    leftovers = [p for p in home.rglob("*") if p.is_file() and "data" not in p.parts]
    assert leftovers == [], leftovers
