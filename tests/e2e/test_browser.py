"""A real browser on another origin (Debian's chromium + chromedriver, driven by selenium): the page
served by a second local server creates a session, plays the setup form and 3 turns with fetch() +
ReadableStream, follows /api/events/stream with EventSource, survives a restart of its web process
with no lost or duplicated event, and reloads the chat from /messages/page finding every UI block;
/api/docs renders and "Try it out" on GET /api/health succeeds. Screenshots go to the run's log dir.

The API is one embedded-shape daphne (SQLite, in-process worker, scripted model) with CORS_ORIGIN
set to the page's origin; the restart is a SIGKILL and a new daphne on the same port and database.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.e2e.client import sse_frames
from tests.e2e.cluster import REPO, free_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
PAGE = Path(__file__).with_name("browser_page.html")
SOURCE_DIRS = ("turns", "sessions", "plugins_app", "jobs", "media", "covel")
# Dotted lower-case string literals in the server's code: every session event type is among them
# (listening for a name that is no event type costs nothing).
_TYPE_LITERAL = re.compile(r"[\"']([a-z][a-z-]*(?:\.[a-z][a-z-]*)+)[\"']")



def event_types() -> list[str]:
    found: set[str] = set()
    for directory in SOURCE_DIRS:
        for path in (REPO / directory).rglob("*.py"):
            found.update(_TYPE_LITERAL.findall(path.read_text(encoding="utf-8")))
    return sorted(found)


class Web:
    """One embedded daphne on a fixed port; restart() SIGKILLs it and starts another on the same port."""

    def __init__(self, home: Path, page_origin: str, *, port: int) -> None:
        self.home = home
        self.port = port
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL")},
            "DJANGO_SETTINGS_MODULE": "covel.settings.embedded", "COVEL_HOME": str(home), "CORS_ORIGIN": page_origin,
            "COVEL_JSON_LOGS": "0", "PYTHONPATH": str(REPO),
        }
        subprocess.run([str(REPO / ".venv/bin/python"), "manage.py", "migrate", "--noinput", "-v0"], cwd=REPO,
                       env=self.env, check=True, timeout=300)
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        log = open(self.home / f"daphne-{self.starts}.log", "w")
        self.proc = subprocess.Popen([str(REPO / ".venv/bin/daphne"), "-b", "127.0.0.1", "-p", str(self.port),
                                      "covel.asgi:application"], cwd=REPO, env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daphne exited: {(self.home / f'daphne-{self.starts}.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("daphne did not come up")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def restart(self) -> None:
        self.kill()
        self.start()


class PageServer:
    """Serves the test page (with the API URL and event types filled in) from another origin."""

    def __init__(self, api_url: str) -> None:
        html = (PAGE.read_text(encoding="utf-8").replace("__API__", api_url + "/api")
                .replace("__EVENT_TYPES__", json.dumps(event_types())))
        body = html.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def browser():
    """Headless Debian chromium through its own chromedriver (no browser or driver download)."""
    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), \
        "the browser scenarios need Debian's chromium and chromium-driver (apt-get install chromium chromium-driver; .ci/run does)"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def wait_for(driver, script: str, *, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {script}: {driver.execute_script('return JSON.stringify(window.covel)')[:2000]}")


def logged_events(api_url: str, session_id: str, token: str) -> list[tuple[str, str]]:
    """The session's whole event log as (id, type), read over HTTP from the first event on."""
    view = httpx.get(f"{api_url}/api/sessions/{session_id}/view", headers={"Authorization": f"Bearer {token}"}).json()
    epoch = view["eventCursor"].split(":")[0]
    out: list[tuple[str, str]] = []
    url = f"{api_url}/api/events/stream?sessionId={session_id}&lastEventId={epoch}:0"
    with httpx.stream("GET", url, timeout=httpx.Timeout(5.0, read=3.0)) as response:
        try:
            for frame in sse_frames(response.iter_lines()):
                if frame.get("event", "").startswith("system."):
                    continue
                out.append((frame["id"], frame["event"]))
        except httpx.ReadTimeout:
            pass  # caught up: nothing new for 3 s
    return out


@pytest.fixture
def stack(tmp_path):
    # The page must know the API's URL and the API the page's origin (CORS_ORIGIN): reserve the API
    # port first, start the page server for it, then the API with the page's origin.
    api_port = free_port()
    page = PageServer(f"http://127.0.0.1:{api_port}")
    web = None
    try:
        home = tmp_path / "home"
        home.mkdir()
        web = Web(home, page.url, port=api_port)
        yield web, page, tmp_path
    finally:
        page.close()
        if web:
            web.kill()


def test_a_browser_on_another_origin_plays_follows_and_reloads(stack, figures):
    web, page, out_dir = stack
    driver = browser()
    try:
        # given the page on its own origin, playing setup and three turns through the API
        driver.get(page.url)
        wait_for(driver, "return window.covel.phase !== 'starting' && window.covel.phase")
        state = driver.execute_script("return window.covel")
        assert state["phase"] == "played", state["errors"]
        assert state["turns"] == 5  # start_session, the form (+ opening), three says
        driver.save_screenshot(str(out_dir / "browser-played.png"))
        session_id, token = state["sessionId"], state["token"]
        seen_before = len(state["events"])
        assert seen_before > 0
        # when its web process is killed and comes back, and the page plays on
        web.restart()
        driver.execute_script("window.covel.afterRestart = false; window.say('I trim the wick.').then(() => "
                              "{ window.covel.afterRestart = true; })")
        wait_for(driver, "return window.covel.afterRestart")
        assert driver.execute_script("return window.covel.errors") == []
        logged = logged_events(web.url, session_id, token)
        # then EventSource reconnected with Last-Event-ID: every logged event exactly once, in order
        wait_for(driver, f"return window.covel.events.length >= {len(logged)}", timeout=60)
        received = [(e["id"], e["type"]) for e in driver.execute_script("return window.covel.events")
                    if not e["type"].startswith("system.")]
        assert received == logged, (len(received), len(logged))
        assert len(received) > seen_before
        # and the chat reloaded from history carries every UI block the streams rendered
        driver.execute_script("window.covel.reloaded = null; window.reloadChat()")
        reloaded = wait_for(driver, "return window.covel.reloaded")
        streamed = set(driver.execute_script("return window.covel.uiRendered"))
        assert streamed and {m["id"] for m in reloaded} == streamed and all(m["hasBlock"] for m in reloaded)
        driver.save_screenshot(str(out_dir / "browser-reloaded.png"))
        figures.append(f"browser: {len(received)} events over a web restart, 0 lost, 0 duplicated; "
                       f"{len(reloaded)} UI blocks rebuilt from /messages/page")
    finally:
        driver.quit()


def test_api_docs_render_and_try_it_out_works(stack):
    web, _page, out_dir = stack
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser()
    try:
        driver.get(f"{web.url}/api/docs")
        wait = WebDriverWait(driver, 60)
        operation = wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "[id$='health'] .opblock-summary")))
        operation.click()
        wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "[id$='health'] .try-out__btn"))).click()
        wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "[id$='health'] .execute"))).click()
        status = wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, "[id$='health'] .live-responses-table tbody .response-col_status")))
        assert status.text.strip().startswith("200")
        driver.save_screenshot(str(out_dir / "api-docs.png"))
    finally:
        driver.quit()
