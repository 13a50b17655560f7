"""Public GitHub sources of packages (spec 004 插件与世界安装: GitHub 链接; the install reference's
GitHub 输入与发布物 / 检查与更新): parsing a link, resolving it to one commit through the GitHub API,
downloading that commit's source archive, finding the packages in it, their content digest, and
the signed preview tokens an install or update later redeems.

Where the requests go: ``settings.COVEL_GITHUB_API_URL`` (default https://api.github.com) and
``settings.COVEL_GITHUB_ARCHIVE_URL`` (default https://codeload.github.com) — operator settings,
so tests point them at a local fake server. Every request goes through ``covel.outbound.send``
(proxy settings honoured, redirects refused, no credential sent) with
``COVEL_GITHUB_TIMEOUT_SECONDS`` per read and the same figure as a deadline for the whole answer,
so a server that trickles bytes still ends in an error. Answers map to the spec's errors:
404 github_not_found, 429 github_rate_limited (403 with ``X-RateLimit-Remaining: 0``, or 429),
502 github_upstream_error (any other non-2xx or a malformed answer), 502 github_unreachable
(no answer: refused, reset, timeout; details.reason), 413 payload_too_large (archive over 20 MiB).

Content digest: sha256 over the package's files sorted by path, each contributing
``<path>\\0<length>\\0<bytes>`` (the install receipt and __pycache__ excluded) — independent of
how GitHub happens to pack its archives.

Preview tokens: ``django.core.signing`` (HMAC with SECRET_KEY, so any web process of a deployment
accepts a token another one issued), salted per purpose (install | update), valid
PREVIEW_TTL_SECONDS. The token carries everything the install needs (repository, commit, path,
digest, id, kind, tracking); the install downloads the commit again and compares the digest.
"""
from __future__ import annotations

import hashlib
import io
import re
import shutil
import time
import zipfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
from django.conf import settings
from django.core import signing

from covel import outbound
from covel.errors import ApiError
from plugins_app import manifests as mf
from plugins_app.trust import RECEIPT_FILE, _package_files
from plugins_app.validation import CODE_ZIP_TOO_LARGE, MAX_ZIP_BYTES, zip_extract_safe

PREVIEW_TTL_SECONDS = 15 * 60
MAX_PACKAGES = 20
OWNER_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
REPO_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
GITHUB_HOSTS = ("github.com", "www.github.com")
COLLECTION_FILE = "covel-collection.yaml"
WORLD_FILE = "world.yaml"
TRACKING_DEFAULT = "default-branch"
TRACKING_BRANCH = "branch"
TRACKING_PINNED = "pinned"
SKIPPED_DIRS = ("node_modules",)


class GithubError(ApiError):
    """An error of a GitHub source (status and code as in the module docstring)."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(status=status, code=code, message=message, details=details)


@dataclass(frozen=True)
class GithubLink:
    """A parsed https://github.com/<owner>/<repo>[/tree/<ref>[/<path>]] link (ref None: the default branch)."""

    owner: str
    repo: str
    ref: str | None
    path: str

    @property
    def repository(self) -> str:
        return f"{self.owner}/{self.repo}"


@dataclass(frozen=True)
class ResolvedSource:
    """A link resolved to one commit. tracking: {kind: default-branch} | {kind: branch, ref} | {kind: pinned, ref}."""

    owner: str
    repo: str
    commit: str
    path: str
    tracking: dict[str, Any]

    @property
    def repository(self) -> str:
        return f"{self.owner}/{self.repo}"


def link_parse(url: Any) -> GithubLink:
    """Parse a public GitHub repository or tree link. A ref containing `/` is written `%2F`.
    Raises 400 invalid_github_url."""
    if not isinstance(url, str) or len(url) > 2000:
        raise GithubError(400, "invalid_github_url", "url must be a https://github.com/<owner>/<repo> link")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:  # an unparsable port or host
        raise GithubError(400, "invalid_github_url", "url must be a https://github.com/<owner>/<repo> link") from None
    if parts.scheme != "https" or (parts.hostname or "").lower() not in GITHUB_HOSTS or port not in (None, 443) \
            or parts.username or parts.query or parts.fragment:
        raise GithubError(400, "invalid_github_url", "url must be a https://github.com/<owner>/<repo> link")
    segments = [s for s in parts.path.split("/") if s]
    if len(segments) < 2:
        raise GithubError(400, "invalid_github_url", "the link names no repository")
    owner, repo = segments[0], segments[1]
    if repo.endswith(".git"):
        repo = repo[:-4]
    if not OWNER_RE.match(owner) or not REPO_RE.match(repo) or repo in (".", ".."):
        raise GithubError(400, "invalid_github_url", "the link's owner or repository name is not valid")
    ref: str | None = None
    path_segments: list[str] = []
    if len(segments) > 2:
        if segments[2] != "tree" or len(segments) < 4:
            raise GithubError(400, "invalid_github_url", "only repository and /tree/<ref>/<path> links are supported")
        ref = unquote(segments[3])
        path_segments = [unquote(s) for s in segments[4:]]
        if not ref or any(c in ref for c in "\\\0") or ".." in ref.split("/"):
            raise GithubError(400, "invalid_github_url", "the link's ref is not valid")
    for segment in path_segments:
        if segment in (".", "..") or "\\" in segment or "\0" in segment or "/" in segment:
            raise GithubError(400, "invalid_github_url", "the link's path is not valid")
    return GithubLink(owner=owner, repo=repo, ref=ref, path="/".join(path_segments))


# ------------------------------------------------------------------------------- HTTP


def _timeout_seconds() -> float:
    return float(settings.COVEL_GITHUB_TIMEOUT_SECONDS)


def _get(url: str, *, max_bytes: int, accept: str) -> bytes:
    """GET ``url`` (an operator-configured GitHub origin) and return its body, or raise GithubError."""
    timeout = _timeout_seconds()
    deadline = time.monotonic() + timeout
    try:
        with outbound.send("GET", url, is_request_supplied=False, headers={"Accept": accept, "User-Agent": "covel-installer"},
                           timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0))) as response:
            status = response.status_code
            if status == 404:
                raise GithubError(404, "github_not_found", "GitHub has no such repository, ref or path")
            if status == 429 or (status == 403 and response.headers.get("x-ratelimit-remaining") == "0"):
                retry = response.headers.get("retry-after") or response.headers.get("x-ratelimit-reset")
                raise GithubError(429, "github_rate_limited", "GitHub's rate limit was reached; try again later",
                                  details={"retryAfter": retry} if retry else None)
            if 300 <= status < 400:
                raise GithubError(502, "github_upstream_error", "GitHub redirected the request (a moved repository?): "
                                  "paste its current address")
            if status >= 400:
                raise GithubError(502, "github_upstream_error", f"GitHub answered {status}")
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise GithubError(413, "payload_too_large", f"the GitHub answer is larger than {max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise GithubError(502, "github_unreachable", "GitHub did not finish answering in time",
                                      details={"reason": outbound.CODE_TIMEOUT})
                chunks.append(chunk)
            return b"".join(chunks)
    except outbound.OutboundError as exc:
        raise GithubError(502, "github_unreachable", f"GitHub could not be reached ({exc.code})",
                          details={"reason": exc.code}) from None
    except httpx.TimeoutException:
        raise GithubError(502, "github_unreachable", "GitHub stopped answering", details={"reason": outbound.CODE_TIMEOUT}) from None
    except httpx.HTTPError as exc:
        raise GithubError(502, "github_unreachable", f"the GitHub connection failed ({type(exc).__name__})",
                          details={"reason": outbound.CODE_UNREACHABLE}) from None


def _api_json(path: str) -> Any:
    import json

    body = _get(settings.COVEL_GITHUB_API_URL.rstrip("/") + path, max_bytes=2 * 1024 * 1024, accept="application/vnd.github+json")
    try:
        return json.loads(body)
    except ValueError:
        raise GithubError(502, "github_upstream_error", "GitHub answered something that is not JSON") from None


def _commit_sha(owner: str, repo: str, ref: str) -> str:
    from urllib.parse import quote

    data = _api_json(f"/repos/{owner}/{repo}/commits/{quote(ref, safe='')}")
    sha = data.get("sha") if isinstance(data, dict) else None
    if not isinstance(sha, str) or not SHA_RE.match(sha):
        raise GithubError(502, "github_upstream_error", "GitHub's commit answer has no sha")
    return sha


def link_resolve(link: GithubLink) -> ResolvedSource:
    """Resolve a link to one commit: a repository link tracks its default branch, a tree link on a
    branch tracks that branch, a tag or commit stays pinned. Raises GithubError."""
    from urllib.parse import quote

    owner, repo = link.owner, link.repo
    if link.ref is None:
        data = _api_json(f"/repos/{owner}/{repo}")
        branch = data.get("default_branch") if isinstance(data, dict) else None
        if not isinstance(branch, str) or not branch:
            raise GithubError(502, "github_upstream_error", "GitHub's repository answer has no default branch")
        return ResolvedSource(owner, repo, _commit_sha(owner, repo, branch), link.path, {"kind": TRACKING_DEFAULT})
    if SHA_RE.match(link.ref):
        return ResolvedSource(owner, repo, _commit_sha(owner, repo, link.ref), link.path, {"kind": TRACKING_PINNED, "ref": link.ref})
    try:
        data = _api_json(f"/repos/{owner}/{repo}/branches/{quote(link.ref, safe='')}")
    except GithubError as exc:
        if exc.status != 404:
            raise
        return ResolvedSource(owner, repo, _commit_sha(owner, repo, link.ref), link.path, {"kind": TRACKING_PINNED, "ref": link.ref})
    sha = ((data.get("commit") or {}).get("sha")) if isinstance(data, dict) else None
    if not isinstance(sha, str) or not SHA_RE.match(sha):
        raise GithubError(502, "github_upstream_error", "GitHub's branch answer has no commit")
    return ResolvedSource(owner, repo, sha, link.path, {"kind": TRACKING_BRANCH, "ref": link.ref})


def tracking_resolve(repository: str, path: str, tracking: dict[str, Any]) -> ResolvedSource | None:
    """The commit an installed package's tracking points at now; None for a pinned install."""
    owner, repo = repository.split("/", 1)
    kind = tracking.get("kind") if isinstance(tracking, dict) else None
    if kind == TRACKING_DEFAULT:
        return link_resolve(GithubLink(owner, repo, None, path))
    if kind == TRACKING_BRANCH and isinstance(tracking.get("ref"), str):
        resolved = link_resolve(GithubLink(owner, repo, tracking["ref"], path))
        return resolved
    return None


class ArchiveCache:
    """Extracted commits of one request (a batch downloads each repository commit once). Call
    ``close()`` (or use as a context manager) to remove the extracted trees."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        self._trees: dict[tuple[str, str], Path] = {}
        self._dirs: list[Path] = []

    def __enter__(self) -> "ArchiveCache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for directory in self._dirs:
            shutil.rmtree(directory, ignore_errors=True)
        self._dirs.clear()
        self._trees.clear()

    def tree(self, repository: str, commit: str) -> Path:
        """The root of the commit's source tree (the archive's one top folder removed)."""
        key = (repository, commit)
        if key not in self._trees:
            import tempfile

            self.parent.mkdir(parents=True, exist_ok=True)
            directory = Path(tempfile.mkdtemp(prefix=".staging-github-", dir=self.parent))
            self._dirs.append(directory)
            self._trees[key] = archive_extract(archive_download(repository, commit), directory / "tree")
        return self._trees[key]


def archive_download(repository: str, commit: str) -> bytes:
    """The zip source archive of ``repository`` at ``commit`` (at most 20 MiB). Raises GithubError."""
    base = settings.COVEL_GITHUB_ARCHIVE_URL.rstrip("/")
    return _get(f"{base}/{repository}/zip/{commit}", max_bytes=MAX_ZIP_BYTES, accept="application/zip")


def archive_case_check(data: bytes, *, kind: str) -> None:
    """Refuse an archive with two members whose paths differ only in letter case (they would
    overwrite each other on a case-insensitive disk): 400 package_invalid, details.code
    zip-unsafe-path. An unreadable archive passes here (the extractor reports it)."""
    from plugins_app.errors import PackageInvalid
    from plugins_app.validation import CODE_ZIP_UNSAFE_PATH, error, report_build

    try:
        names = [m.filename for m in zipfile.ZipFile(io.BytesIO(data)).infolist()]
    except (zipfile.BadZipFile, OSError, ValueError):
        return
    folded: dict[str, str] = {}
    for name in names:
        key = name.rstrip("/").lower()
        if key in folded and folded[key] != name:
            issue = error(CODE_ZIP_UNSAFE_PATH, "two archive members differ only in letter case", None, name)
            raise PackageInvalid("The archive has case-colliding paths", report_build(kind=kind, package_id=None, issues=[issue]).as_dict())  # type: ignore[arg-type]
        folded[key] = name


def archive_extract(data: bytes, destination: Path) -> Path:
    """Extract a GitHub source archive safely (zip-slip, links, bombs, case-colliding names refused:
    400 package_invalid / 413 payload_too_large) and return the tree below its one top folder."""
    from plugins_app.errors import PackageInvalid
    from plugins_app.validation import report_build

    archive_case_check(data, kind="plugin")
    issues = zip_extract_safe(data, destination)
    if any(i.code == CODE_ZIP_TOO_LARGE for i in issues):
        raise GithubError(413, "payload_too_large", issues[0].message)
    if issues:
        raise PackageInvalid("The GitHub archive cannot be used", report_build(kind="plugin", package_id=None, issues=issues).as_dict())
    children = [c for c in destination.iterdir()]
    if len(children) == 1 and children[0].is_dir():
        return children[0]
    raise GithubError(502, "github_upstream_error", "the GitHub archive does not hold one top folder")


def subtree(tree: Path, path: str) -> Path:
    """The folder ``path`` inside an extracted tree; 404 github_not_found when it is missing."""
    root = tree.joinpath(*path.split("/")) if path else tree
    resolved, base = root.resolve(), tree.resolve()
    if (resolved != base and base not in resolved.parents) or not root.is_dir() or root.is_symlink():
        raise GithubError(404, "github_not_found", f"the repository has no folder {path!r} at that commit")
    return root


# ------------------------------------------------------------------------------- packages


def package_kind(root: Path) -> str | None:
    """"plugin" (a root PLUGIN.md), "world" (a root world.yaml) or None."""
    if (root / mf.PLUGIN_FILE).is_file():
        return "plugin"
    if (root / WORLD_FILE).is_file():
        return "world"
    return None


def packages_find(root: Path, *, limit: int = MAX_PACKAGES) -> list[tuple[str, Path]]:
    """(kind, folder) of every package below ``root``: the folder itself when it is a package
    (its runtimes/ are not split off), else a recursive walk skipping hidden folders and
    node_modules, not descending into a package. Raises 400 too_many_packages beyond ``limit``."""
    kind = package_kind(root)
    if kind is not None:
        return [(kind, root)]
    found: list[tuple[str, Path]] = []

    def walk(directory: Path) -> None:
        for child in sorted(directory.iterdir(), key=lambda p: p.name):
            if not child.is_dir() or child.is_symlink() or child.name.startswith(".") or child.name in SKIPPED_DIRS:
                continue
            child_kind = package_kind(child)
            if child_kind is not None:
                found.append((child_kind, child))
                if len(found) > limit:
                    raise GithubError(400, "too_many_packages", f"more than {limit} packages below this link; "
                                      "link a more specific folder")
            else:
                walk(child)

    walk(root)
    return found


def package_digest(root: Path) -> str:
    """``sha256:<hex>`` of the package's content (see the module docstring)."""
    digest = hashlib.sha256()
    for rel, path in _package_files(Path(root)).items():
        if rel == RECEIPT_FILE:
            continue
        data = path.read_bytes()
        digest.update(f"{rel}\0{len(data)}\0".encode("utf-8"))
        digest.update(data)
    return "sha256:" + digest.hexdigest()


def package_file_digests(root: Path) -> dict[str, str]:
    """{package-relative path: sha256 hex} (for an update's `changes`)."""
    return {rel: hashlib.sha256(p.read_bytes()).hexdigest() for rel, p in _package_files(Path(root)).items() if rel != RECEIPT_FILE}


def file_changes(old: dict[str, str], new: dict[str, str]) -> dict[str, list[str]]:
    """{added, modified, removed}: package-relative paths, sorted."""
    return {"added": sorted(set(new) - set(old)), "modified": sorted(k for k in set(new) & set(old) if new[k] != old[k]),
            "removed": sorted(set(old) - set(new))}


def plugin_capabilities(manifest: mf.PluginManifest) -> dict[str, Any]:
    """The declaration snapshot a preview shows before the risk is accepted: server code (entry,
    function handlers), HTTP, hooks, tools, actions, service contracts, wires, extensions, forms
    and datasets — what the manifest declares, read without running anything."""
    contributes = manifest.contributes
    handlers = sorted(r.id for r in manifest.runtimes if r.function is not None and r.function.handler)
    http = manifest.raw.get("http") if isinstance(manifest.raw, dict) else None
    return {
        "code": {"entry": manifest.entry, "language": manifest.entry_language, "functionHandlers": handlers,
                 "hasServerCode": bool(manifest.entry) or bool(handlers)},
        "http": http if isinstance(http, (list, dict)) else [],
        "hooks": sorted({h.get("event") for h in contributes.hooks if isinstance(h, dict) and isinstance(h.get("event"), str)}),
        "tools": list(contributes.tools),
        "actions": list(contributes.actions),
        "services": list(contributes.services),
        "wires": list(contributes.wires),
        "extensions": [e.get("point") or e.get("id") for e in contributes.extensions if isinstance(e, dict)],
        "forms": list(contributes.forms),
        "datasets": sorted(contributes.datasets),
    }


def author_name(author: Any) -> str | None:
    if isinstance(author, dict) and isinstance(author.get("name"), str):
        return author["name"]
    return author if isinstance(author, str) else None


# ------------------------------------------------------------------------------- tokens


def _salt(purpose: str) -> str:
    return f"covel.install.github.{purpose}"


def token_issue(payload: dict[str, Any], *, purpose: str) -> tuple[str, str]:
    """(signed token, expiresAt ISO 8601 UTC) for ``payload`` (purpose: install | update)."""
    token = signing.dumps(payload, salt=_salt(purpose), compress=True)
    expires = datetime.now(timezone.utc) + timedelta(seconds=PREVIEW_TTL_SECONDS)
    return token, expires.isoformat(timespec="seconds").replace("+00:00", "Z")


def token_redeem(token: Any, *, purpose: str, kind: str | None = None) -> dict[str, Any]:
    """The payload of a preview token. Raises 400 invalid_preview_token (malformed, forged, another
    purpose or package kind), 409 preview_expired (older than 15 minutes)."""
    if not isinstance(token, str) or not token or len(token) > 16384:
        raise GithubError(400, "invalid_preview_token", "token must be the token of a preview")
    try:
        payload = signing.loads(token, salt=_salt(purpose), max_age=PREVIEW_TTL_SECONDS)
    except signing.SignatureExpired:
        raise GithubError(409, "preview_expired", "The preview expired; preview again") from None
    except signing.BadSignature:
        raise GithubError(400, "invalid_preview_token", "The token is not a valid preview token") from None
    if not isinstance(payload, dict) or (kind is not None and payload.get("kind") != kind):
        raise GithubError(400, "invalid_preview_token", f"The token is not a {kind} preview token")
    return payload


def accept_risk_check(body: Any) -> dict[str, Any]:
    """The body of an install/update confirmation: {token(s), acceptRisk: true}. Raises 400
    invalid_request (not an object) / risk_not_accepted."""
    if not isinstance(body, dict):
        raise GithubError(400, "invalid_request", "Send a JSON object")
    if body.get("acceptRisk") is not True:
        raise GithubError(400, "risk_not_accepted", "Installing runs third-party content: send acceptRisk: true")
    return body


__all__ = [
    "ArchiveCache", "GithubError", "GithubLink", "ResolvedSource", "accept_risk_check", "archive_case_check", "archive_download",
    "archive_extract", "author_name", "file_changes", "link_parse", "link_resolve", "package_digest",
    "package_file_digests", "package_kind", "packages_find", "plugin_capabilities", "subtree", "token_issue",
    "token_redeem", "tracking_resolve",
]
