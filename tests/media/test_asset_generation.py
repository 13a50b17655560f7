"""asset.generate end to end (spec 000 §Proposal 类型 asset.generate; spec 004 §图像/媒体生成输出,
asset.progress / asset.generated): a plugin tool stages the request, the commit queues a media job,
the job makes the image through the ``image`` slot — the offline scripted provider (a real PNG) or
an OpenAI-compatible images API over real HTTP on 127.0.0.1 — stores it as session media and
publishes it. The painter plugin is in tests/turns/tools_support.py."""
from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from media.generation import ScriptedImageProvider, png_encode
from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from tests.turns.tools_support import builtin_dir_with_tools
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db(transaction=True)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The story and plugin runtimes keep the offline model; only images go to the images API.
SCRIPTED_TEXT_SLOTS = '[covel.story]\nprovider = "scripted"\n[covel.plugin]\nprovider = "scripted"\n'


@pytest.fixture(autouse=True)
def plugins(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_tools(tmp_path / "builtin"))
    llm = Path(settings.COVEL_HOME) / "llm.toml"
    saved = llm.read_text(encoding="utf-8") if llm.exists() else None
    registry_reset()
    yield llm
    registry_reset()
    if saved is None:
        llm.unlink(missing_ok=True)
    else:
        llm.write_text(saved, encoding="utf-8")


def _record(session, timeout=15.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = PluginData.objects.filter(session=session, plugin_id="painter", namespace="_assets").first()
        if row is not None and row.value.get("status") in ("done", "failed"):
            return row.value
        time.sleep(0.05)
    raise AssertionError("the asset job did not finish")


def _paint(api):
    session = session_make(plugins=("narrator", "painter"), characters=[("hero", "Hero", "player")])
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]["payload"]
    return session, frames


def _download(api, session_id, media_id) -> bytes:
    issued = api.get(f"/api/sessions/{session_id}/media-token?id={media_id}")
    assert issued.status_code == 200, issued.content
    response = api.get(issued.json()["url"])
    assert response.status_code == 200
    return b"".join(response.streaming_content)


def test_asset_generate_makes_a_png_offline_and_publishes_it(api):
    # when the painter's tool stages asset.generate and the turn commits
    session, frames = _paint(api)
    # then the tool call succeeded as a staged write and the commit queued a job (asset.progress 0)
    done = [f["payload"] for f in frames if f["type"] == "tool.completed" and f["payload"].get("tool") == "paint-scene"]
    assert done[0]["output"]["staged"]["kinds"] == ["asset.generate"]
    # the media job made a real PNG with the scripted provider and stored it as this session's media
    record = _record(session)
    assert record["status"] == "done" and record["prompt"] == "A misty harbour stairway"
    ref = record["ref"]
    assert ref["mime"] == "image/png" and set(ref) >= {"id", "mime", "sha256"}
    data = _download(api, session.id, ref["sha256"])
    expected = ScriptedImageProvider().generate("A misty harbour stairway")
    assert data.startswith(PNG_SIGNATURE) and data == expected
    # asset.progress (queued, then done) and asset.generated went to the session's event log
    events = [(e.type, e.payload) for e in SessionEvent.objects.filter(session=session, type__startswith="asset.").order_by("seq")]
    assert [(t, p.get("status")) for t, p in events] == [("asset.progress", "queued"), ("asset.progress", "done"),
                                                          ("asset.generated", None)]
    generated = events[-1][1]
    assert generated["ref"] == ref and generated["pluginId"] == "painter" and generated["runtimeId"] == "painter"
    assert generated["meta"]["provider"] == "scripted"


class _ImagesApi(BaseHTTPRequestHandler):
    """An OpenAI-compatible images endpoint: POST /v1/images/generations → {data: [{b64_json}]}."""

    seen: list[dict] = []
    image = png_encode(2, 2, bytes([200, 10, 10] * 4))

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "body": body})
        answer = json.dumps({"created": 1, "data": [{"b64_json": base64.b64encode(self.image).decode()}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def test_asset_generate_through_an_openai_compatible_images_api(api, plugins):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ImagesApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _ImagesApi.seen = []
    try:
        plugins.write_text(SCRIPTED_TEXT_SLOTS + '[covel.image]\nprovider = "openai"\nmodel = "gpt-image-1"\n'
                           f'baseUrl = "http://127.0.0.1:{server.server_address[1]}/v1"\n', encoding="utf-8")
        session, _frames = _paint(api)
        record = _record(session)
    finally:
        server.shutdown()
        server.server_close()
    assert record["status"] == "done", record
    assert _ImagesApi.seen == [{"path": "/v1/images/generations",
                                "body": {"model": "gpt-image-1", "prompt": "A misty harbour stairway", "n": 1,
                                         "size": "1024x1024", "response_format": "b64_json"}}]
    assert _download(api, session.id, record["ref"]["sha256"]) == _ImagesApi.image
    assert record["meta"] == {"prompt": "A misty harbour stairway", "provider": "openai", "model": "gpt-image-1"}


def test_a_provider_failure_is_reported_on_the_job(api, plugins):
    # an images endpoint nobody listens on: the job fails, the turn had committed already
    plugins.write_text(SCRIPTED_TEXT_SLOTS + '[covel.image]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "http://127.0.0.1:9/v1"\n',
                       encoding="utf-8")
    session, _frames = _paint(api)
    record = _record(session)
    assert record["status"] == "failed" and record["error"]["code"] == "unreachable"
    failed = SessionEvent.objects.filter(session=session, type="asset.progress").order_by("seq").last()
    assert failed.payload["status"] == "failed" and failed.payload["error"]["code"] == "unreachable"
