"""Installs reach every process without a restart of each (issue 21; spec 004 安装后的重启和刷新):
a declarative plugin is installed from a zip through web #1, and at once web #2 lists it, a session
created through web #2 selects it, and — its source trusted (trust.sources + the install receipt) —
a Celery worker runs its runtime in a turn; uninstalled through web #2, web #1 drops it. The registry generation marker in COVEL_HOME/plugins tells every
process to rebuild its registry at its next read (plugins_app/registry.py).
"""
from __future__ import annotations

import io
import zipfile

from plugins_app.trust import receipt_write
from tests.e2e.client import Api
from tests.e2e.play import PlayedSession, expect_committed, say, session_setup

PLUGIN = "lamp-log"
PLUGIN_MD = ("---\nid: lamp-log\nkind: plugin\nversion: 0.1.0\ndescription: Logs lamps.\nruntime:\n  type: agent\n"
             "  schedule: {stage: post-turn, trigger: {type: auto}}\n---\nNote every lamp that is lit.\n")
WORLD = "hollow-reach-light"


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("PLUGIN.md", PLUGIN_MD)
    return buffer.getvalue()


def test_a_plugin_installed_on_one_web_process_is_usable_on_the_other_and_the_workers(cluster, web1):
    web2 = Api(cluster.base_urls[1])
    pids = [proc.pid for proc in cluster.web]
    assert web2.get(f"/api/plugins/{PLUGIN}").status_code == 404  # web #2 has built its registry already

    # when the plugin is installed through web #1 (no process is restarted)
    installed = web1.http.post("/api/install/plugin", files={"file": ("lamp-log.zip", _zip(), "application/zip")})
    assert installed.status_code == 201, installed.text

    # then web #2 lists it, and a session created there selects it
    assert web2.json("GET", f"/api/plugins/{PLUGIN}")["hostState"] == "loaded"
    # (the shared cluster's home may hold packages earlier scenarios installed: count this one)
    assert [i["id"] for i in web2.json("GET", "/api/install/plugins")["items"]].count(PLUGIN) == 1
    plan = web2.json("GET", f"/api/worlds/{WORLD}/plugin-plan")
    created = web2.json("POST", "/api/sessions", {"worldId": WORLD, "plugins": [*plan["defaultPluginIds"], PLUGIN]}, expect=201)
    played = PlayedSession(id=created["id"], token=created["ownerToken"], api=web2.with_token(created["ownerToken"]), created=created)
    items = played.api.json("GET", f"/api/sessions/{played.id}/plugins")["items"]
    assert next(i for i in items if i["id"] == PLUGIN)["approvalRequired"] is True  # selected, waiting for a grant
    # the operator trusts acme, and the package carries the receipt a GitHub install from acme records
    # (tests/plugins_app/test_github_install.py covers that install path against the fake GitHub)
    receipt_write(cluster.covel_home / "plugins" / PLUGIN, "acme/lamp-log")
    web1.json("PUT", "/api/config/server-settings", {"entries": {"trust.sources": ["acme"]}})
    trust = web2.json("GET", f"/api/plugins/{PLUGIN}")["trust"]
    assert trust == {"source": "acme/lamp-log", "trustedSource": True, "integrity": "verified", "autoApproved": True}

    # and a worker runs its runtime in a turn
    session_setup(played)
    expect_committed(say(played, "I light the lamp by the door."))
    outputs = played.api.json("GET", f"/api/sessions/{played.id}/runtime-outputs")["items"]
    assert any(o.get("pluginId") == PLUGIN for o in outputs), [o.get("pluginId") for o in outputs]
    assert [proc.pid for proc in cluster.web] == pids  # nothing was restarted

    # when it is uninstalled through web #2, web #1 drops it too
    removed = web2.http.delete(f"/api/plugins/{PLUGIN}")
    assert removed.status_code == 200 and removed.json()["restartRequired"] is True, removed.text
    assert web1.get(f"/api/plugins/{PLUGIN}").status_code == 404
    assert PLUGIN not in [i["id"] for i in web1.json("GET", "/api/install/plugins")["items"]]
    web1.json("PUT", "/api/config/server-settings", {"entries": {"trust.sources": None}})
    web2.close()
