"""A fake GitHub over real HTTP on 127.0.0.1, for the GitHub install tests (spec 004 插件与世界安装).

It answers the few GitHub API routes the installer uses and serves source archives built from
folders (usually fixture packages under /work/shared/fixtures/upstream/):

- ``GET /api/repos/{owner}/{repo}`` → ``{default_branch}``
- ``GET /api/repos/{owner}/{repo}/branches/{branch}`` → ``{name, commit: {sha}}`` (404 when not a branch)
- ``GET /api/repos/{owner}/{repo}/commits/{ref}`` → ``{sha}`` (branch, tag or full sha)
- ``GET /archive/{owner}/{repo}/zip/{sha}`` → a zip whose one top folder is ``{repo}-{sha}/``,
  as codeload.github.com answers

``FakeGithub.fault(substring, kind, ...)`` makes requests whose path contains ``substring``
answer a rate-limit 403 (``X-RateLimit-Remaining: 0``), a 429, a 404, a 500, or stall (accept,
then send nothing). Requests are recorded in ``.requests`` (paths), so a test can assert that
nothing was fetched. Point ``settings.COVEL_GITHUB_API_URL`` at ``.api_url`` and
``COVEL_GITHUB_ARCHIVE_URL`` at ``.archive_url``.
"""
from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest


def files_of(folder: Path, prefix: str = "") -> dict[str, bytes]:
    """{prefix + relative path: bytes} of every file below ``folder``."""
    return {prefix + p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


@dataclass
class Repo:
    default_branch: str = "main"
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    #: sha → archive bytes served instead of the built one (hostile archives)
    raw_archives: dict[str, bytes] = field(default_factory=dict)


class FakeGithub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[str] = []
        self.faults: list[tuple[str, str, int]] = []
        self._release = threading.Event()
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.api_url = base + "/api"
        self.archive_url = base + "/archive"

    # --- content -------------------------------------------------------------------------------

    def commit(self, repository: str, files: dict[str, bytes | str], *, branch: str = "main", tag: str | None = None) -> str:
        """Add a commit holding exactly ``files`` to ``repository`` (created on first use), move
        ``branch`` to it (and ``tag`` when given). Returns its 40-hex sha."""
        repo = self.repos.setdefault(repository, Repo())
        content = {k: v.encode("utf-8") if isinstance(v, str) else v for k, v in files.items()}
        digest = hashlib.sha1(json.dumps({k: hashlib.sha1(v).hexdigest() for k, v in sorted(content.items())}).encode()
                              + str(len(repo.commits)).encode() + repository.encode())
        sha = digest.hexdigest()
        repo.commits[sha] = content
        if branch:
            repo.branches[branch] = sha
        if tag:
            repo.tags[tag] = sha
        return sha

    def fault(self, substring: str, kind: str, count: int = 1_000_000) -> None:
        """Answer requests whose path contains ``substring`` with a fault: rate-limit (403 with
        X-RateLimit-Remaining: 0), 429, 404, 500 or stall; for the next ``count`` matching requests."""
        self.faults.append((substring, kind, count))

    def clear_faults(self) -> None:
        self.faults.clear()

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    # --- HTTP ----------------------------------------------------------------------------------

    def _archive(self, repository: str, sha: str) -> bytes:
        raw = self.repos[repository].raw_archives.get(sha)
        if raw is not None:
            return raw
        repo_name = repository.split("/", 1)[1]
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(f"{repo_name}-{sha}/", b"")
            for name, data in sorted(self.repos[repository].commits[sha].items()):
                archive.writestr(f"{repo_name}-{sha}/{name}", data)
        return buffer.getvalue()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet test output
                pass

            def _send(self, status: int, body: bytes, content_type: str = "application/json", headers: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, data: object) -> None:
                self._send(status, json.dumps(data).encode())

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path
                fake.requests.append(path)
                for index, (substring, kind, count) in enumerate(fake.faults):
                    if substring in path and count > 0:
                        fake.faults[index] = (substring, kind, count - 1)
                        return self._fault(kind)
                parts = [unquote(p) for p in path.split("?", 1)[0].split("/") if p]
                if len(parts) >= 4 and parts[0] == "api" and parts[1] == "repos":
                    return self._api(f"{parts[2]}/{parts[3]}", parts[4:])
                if len(parts) == 5 and parts[0] == "archive" and parts[3] == "zip":
                    repository = f"{parts[1]}/{parts[2]}"
                    repo = fake.repos.get(repository)
                    if repo is None or parts[4] not in repo.commits:
                        return self._json(404, {"message": "Not Found"})
                    return self._send(200, fake._archive(repository, parts[4]), "application/zip")
                return self._json(404, {"message": "Not Found"})

            def _api(self, repository: str, rest: list[str]) -> None:
                repo = fake.repos.get(repository)
                if repo is None:
                    return self._json(404, {"message": "Not Found"})
                if not rest:
                    return self._json(200, {"full_name": repository, "default_branch": repo.default_branch})
                if len(rest) == 2 and rest[0] == "branches":
                    sha = repo.branches.get(rest[1])
                    if sha is None:
                        return self._json(404, {"message": "Branch not found"})
                    return self._json(200, {"name": rest[1], "commit": {"sha": sha}})
                if len(rest) == 2 and rest[0] == "commits":
                    ref = rest[1]
                    sha = repo.branches.get(ref) or repo.tags.get(ref) or (ref if ref in repo.commits else None)
                    if sha is None:
                        return self._json(404, {"message": "No commit found"})
                    return self._json(200, {"sha": sha})
                return self._json(404, {"message": "Not Found"})

            def _fault(self, kind: str) -> None:
                if kind == "rate-limit":
                    return self._send(403, b'{"message": "API rate limit exceeded"}',
                                      headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1900000000"})
                if kind == "429":
                    return self._send(429, b'{"message": "Too Many Requests"}', headers={"Retry-After": "60"})
                if kind == "404":
                    return self._json(404, {"message": "Not Found"})
                if kind == "500":
                    return self._json(500, {"message": "Server Error"})
                if kind == "stall":
                    fake._release.wait(30)
                    return None
                raise AssertionError(kind)

        return Handler


@pytest.fixture
def github(settings):
    """A running FakeGithub with the install settings pointed at it (5 s GitHub timeout: the fake
    runs in the test process, which may be slow on a loaded machine; stall tests lower it)."""
    fake = FakeGithub()
    settings.COVEL_GITHUB_API_URL = fake.api_url
    settings.COVEL_GITHUB_ARCHIVE_URL = fake.archive_url
    settings.COVEL_GITHUB_TIMEOUT_SECONDS = 5
    yield fake
    fake.close()
