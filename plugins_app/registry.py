"""The plugin registry: discovered manifests, host state and what each entry module registered.

Pure Python (no Django); the API layer caches one registry per COVEL_HOME.

Python entry modules. A manifest names its entry with `entry: ./server/entry.py` (any package-
relative `.py` path). The module is loaded by file path as `covel_plugin_<id>.<path.dotted>`
(the plugin root is a synthetic package, so relative imports between the plugin's own modules
work) and must define `register(api)`. `api` is a `PluginRegistrationApi`:

    api.register_tool(name, handler, **options)          # contributes.tools
    api.register_rpc(name, handler, **options)           # contributes.actions
    api.register_form_validator(name, validator)         # contributes.forms
    api.register_hook(event, handler, enforce="normal")  # contributes.hooks
    api.register_service(contract, provider, **options)  # contributes.services
    api.register_extension(point, id, provider)          # contributes.extensions (optional: client-only ones need none)

Community packages (source "community") are never imported at start: their entry waits with
hostState "installed" until a session grants ``covel:plugin-server-code`` (or trust.sources
satisfies it) and the caller that checked the grant calls ``PluginRegistry.entry_ensure`` (spec 000
§第三方插件 server-code 审批边界: 服务启动时不执行这些插件的 entry). Loading is process-wide and once;
running is still checked per session. Builtin entries load when the registry is built.

Every registration must be declared in the manifest and every declaration must be registered
(spec: "Every entry registration needs a declaration here, and every declaration needs an
implementation"). Registrations are staged and published only when `register()` returns and all
checks pass: a failing entry leaves nothing half-registered (hostState "error").
Plugin code never imports the Django project; it gets everything through `api`.

JavaScript entries (upstream packages) cannot run here: the plugin gets an `entry-not-loadable`
error and hostState "error", while its declarative parts (runtimes, contributes) stay listed.
A JavaScript function handler in an otherwise loadable plugin disables only that runtime.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from plugins_app.discovery import SOURCE_BUILTIN, DiscoveredPlugin, plugins_discover
from plugins_app.manifests import (
    HOOK_EVENTS,
    PLUGIN_FILE,
    PluginManifest,
    RuntimeManifest,
    package_path_resolve,
    plugin_manifest_load,
    runtime_handler_language,
    text_languages,
)
from plugins_app.toolkit.modules import module_load_by_path
from plugins_app.trust import action_is_reserved, plugin_trust
from plugins_app.validation import Issue, error

logger = logging.getLogger(__name__)

HOST_DISCOVERED = "discovered"
HOST_INSTALLED = "installed"
HOST_LOADED = "loaded"
HOST_ERROR = "error"

CODE_ENTRY_NOT_LOADABLE = "entry-not-loadable"
CODE_ENTRY_FAILED = "entry-failed"
CODE_HANDLER_NOT_LOADABLE = "handler-not-loadable"
CODE_REGISTRATION_UNDECLARED = "registration-undeclared"
CODE_CONTRIBUTION_NOT_IMPLEMENTED = "contribution-not-implemented"


class RegistrationError(ValueError):
    """Raised by PluginRegistrationApi for an undeclared, duplicate or malformed registration."""


@dataclass(frozen=True)
class Registration:
    """One thing an entry registered. kind: tool|rpc|form_validator|hook|service|extension; name: tool/
    action/form name, hook event, service contract or extension id; target: the callable or provider."""

    plugin_id: str
    kind: str
    name: str
    target: Any
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Registrations:
    """Everything one entry registered, by kind and name (hooks: event → list)."""

    tools: dict[str, Registration] = field(default_factory=dict)
    rpcs: dict[str, Registration] = field(default_factory=dict)
    form_validators: dict[str, Registration] = field(default_factory=dict)
    hooks: dict[str, list[Registration]] = field(default_factory=dict)
    services: dict[str, Registration] = field(default_factory=dict)
    extensions: dict[str, Registration] = field(default_factory=dict)  # by extension id


class PluginRegistrationApi:
    """The host API handed to a plugin entry's `register(api)`. Collects into a staging area."""

    def __init__(self, manifest: PluginManifest):
        self.plugin_id = manifest.id
        self._manifest = manifest
        self.staged = Registrations()

    def _callable(self, kind: str, name: str, target: Any) -> None:
        if not callable(target):
            raise RegistrationError(f"{kind} {name!r}: handler must be callable")

    def register_tool(self, name: Any, handler: Callable[..., Any] | None = None, **options: Any) -> None:
        """Register a plugin tool. `name` may be a tool definition object with `.name` (and
        `.handler` when handler is omitted). The name must be listed in contributes.tools."""
        definition = None
        if not isinstance(name, str):
            definition, name = name, getattr(name, "name", None)
            if handler is None:
                handler = getattr(definition, "handler", None) or getattr(definition, "execute", None)
            if not isinstance(name, str):
                raise RegistrationError("tool definition has no name")
            options = {**options, "definition": definition}
        if name not in self._manifest.contributes.tools:
            raise RegistrationError(f"tool {name!r} is not declared in contributes.tools")
        if name in self.staged.tools:
            raise RegistrationError(f"tool {name!r} is registered twice")
        if definition is None or handler is not None:
            self._callable("tool", name, handler)
        self.staged.tools[name] = Registration(self.plugin_id, "tool", name, handler, options)

    def register_rpc(self, name: str, handler: Callable[..., Any], **options: Any) -> None:
        """Register an RPC action (plugin-rpc / slash commands); must be in contributes.actions and
        must not use a framework approval prefix (covel:, runtime:, event:)."""
        if action_is_reserved(name):
            raise RegistrationError(f"action {name!r} uses a reserved framework prefix")
        if name not in self._manifest.contributes.actions:
            raise RegistrationError(f"action {name!r} is not declared in contributes.actions")
        if name in self.staged.rpcs:
            raise RegistrationError(f"action {name!r} is registered twice")
        self._callable("action", name, handler)
        self.staged.rpcs[name] = Registration(self.plugin_id, "rpc", name, handler, options)

    def register_form_validator(self, name: str, validator: Callable[..., Any]) -> None:
        """Register a synchronous, pure form validator; must be in contributes.forms (spec 000)."""
        if name not in self._manifest.contributes.forms:
            raise RegistrationError(f"form {name!r} is not declared in contributes.forms")
        if name in self.staged.form_validators:
            raise RegistrationError(f"form {name!r} is registered twice")
        self._callable("form validator", name, validator)
        self.staged.form_validators[name] = Registration(self.plugin_id, "form_validator", name, validator)

    def register_hook(self, event: str, handler: Callable[..., Any], *, enforce: str = "normal") -> None:
        """Register a lifecycle hook; the event must be declared in contributes.hooks."""
        if event not in HOOK_EVENTS:
            raise RegistrationError(f"unknown hook event {event!r}")
        declared = {h.get("event") for h in self._manifest.contributes.hooks}
        if event not in declared:
            raise RegistrationError(f"hook {event!r} is not declared in contributes.hooks")
        self._callable("hook", event, handler)
        self.staged.hooks.setdefault(event, []).append(
            Registration(self.plugin_id, "hook", event, handler, {"enforce": enforce})
        )

    def register_service(self, contract: str, provider: Any, **options: Any) -> None:
        """Register a service for a contract id listed in contributes.services."""
        if contract not in self._manifest.contributes.services:
            raise RegistrationError(f"service {contract!r} is not declared in contributes.services")
        if contract in self.staged.services:
            raise RegistrationError(f"service {contract!r} is registered twice")
        self.staged.services[contract] = Registration(self.plugin_id, "service", contract, provider, options)

    def register_extension(self, point: str, extension_id: str, provider: Callable[..., Any], **options: Any) -> None:
        """Register the server-side provider of an extension declared in contributes.extensions as
        ``{point, id}`` (e.g. ``media.image-flow@1``; plugins_app/extensions.py calls it). Extensions
        that only the client renders need no provider."""
        declared = {(e.get("point"), e.get("id")) for e in self._manifest.contributes.extensions}
        if (point, extension_id) not in declared:
            raise RegistrationError(f"extension {point}:{extension_id} is not declared in contributes.extensions")
        if extension_id in self.staged.extensions:
            raise RegistrationError(f"extension {extension_id!r} is registered twice")
        self._callable("extension", extension_id, provider)
        options = {**options, "point": point}
        self.staged.extensions[extension_id] = Registration(self.plugin_id, "extension", extension_id, provider, options)


@dataclass
class PluginRecord:
    """A plugin as the registry sees it: manifest, source, hostState, error text and registrations.

    host_state: discovered | installed | loaded | error (spec 004 PluginSummary.hostState);
    "installed": a community package whose Python entry waits for a session's server-code grant.
    error: client-safe text with the plugin root written as `<plugin>`.
    registrations: what the entry registered; empty unless host_state == "loaded".
    """

    manifest: PluginManifest
    source: str
    host_state: str = HOST_DISCOVERED
    error: str | None = None
    issues: list[Issue] = field(default_factory=list)
    registrations: Registrations = field(default_factory=Registrations)
    #: How many dev hot reloads replaced this package in this process (PluginRegistry.plugin_reload).
    reload_generation: int = 0
    #: (folder inode, folder mtime, PLUGIN.md mtime) when a community record was built: a registry
    #: refresh reuses the record while they are unchanged.
    package_stamp: tuple[int, int, int] | None = None

    @property
    def id(self) -> str:
        return self.manifest.id

    @property
    def is_loaded(self) -> bool:
        """The plugin can be used: its entry is published, or it is a community package whose entry
        is loaded on the first granted use (``is_code_pending``)."""
        return self.host_state in (HOST_LOADED, HOST_INSTALLED)

    @property
    def is_code_pending(self) -> bool:
        """A community entry not imported in this process yet (see ``PluginRegistry.entry_ensure``)."""
        return self.host_state == HOST_INSTALLED

    @property
    def needs_code_grant(self) -> bool:
        """Its server code and runtimes run only with a session grant (every non-builtin package)."""
        return self.source != SOURCE_BUILTIN

    def summary(self) -> dict[str, Any]:
        """PluginSummary (spec 004 GET /api/plugins)."""
        m = self.manifest
        out: dict[str, Any] = {
            "id": m.id,
            "displayName": m.display_name if m.display_name is not None else m.id,
            "description": m.description,
            "kind": m.kind,
            "source": self.source,
            "hostState": self.host_state,
            "provides": m.provided_contracts,
            "requires": list(m.requires),
            "optional": m.optional_contracts,
            "conflicts": list(m.conflicts),
            "extensions": [dict(e) for e in m.contributes.extensions],
            "eventTopics": m.contributes.event_topics,
            "runtimeCount": len(m.runtimes),
            "runtimes": [r.summary() for r in m.runtimes],
            "tools": list(m.contributes.tools),
            "userSettings": [dict(s) for s in m.contributes.settings],
            "tags": list(m.tags),
            "languages": {
                "text": text_languages(m.display_name, m.description),
                "instructions": ["en"],
            },
        }
        if self.error:
            out["error"] = self.error
        if self.needs_code_grant:
            out["trust"] = plugin_trust(m.root)
        if m.disabled_runtimes:
            out["disabledRuntimes"] = [dict(d) for d in m.disabled_runtimes]
        if m.ignored_fields:
            out["ignoredFields"] = m.ignored_fields
        for key, value in (("version", m.version), ("author", m.author), ("license", m.license), ("homepage", m.homepage)):
            if value is not None:
                out[key] = value
        return out

    def detail(self) -> dict[str, Any]:
        """PluginDetail (spec 004 GET /api/plugins/:id): summary + contracts, data, ui, runtimes."""
        m = self.manifest
        out = self.summary()
        namespaces = list(m.contributes.data)
        for runtime in m.runtimes:
            for item in runtime.self_data:
                ns = item.get("namespace")
                if isinstance(ns, str) and ns not in namespaces:
                    namespaces.append(ns)
        for name in m.contributes.datasets:
            if name not in namespaces:
                namespaces.append(name)
        out.update({
            "dataSchemas": {k: dict(v) for k, v in m.contributes.data.items()},
            "datasets": {k: dict(v) for k, v in m.contributes.datasets.items()},
            "worldProjections": {
                k: {"from": v.get("from"), "outputs": v.get("outputs")} for k, v in m.contributes.world_projections.items()
            },
            "declaredPluginDataNamespaces": namespaces,
            "contracts": {k: dict(v) for k, v in m.contracts.items()},
            "ui": {slot: [{"path": p} for p in paths] for slot, paths in m.contributes.ui.items()},
            "actions": list(m.contributes.actions),
            "commands": [dict(c) for c in m.contributes.commands],
            "services": list(m.contributes.services),
            "forms": list(m.contributes.forms),
            "hooks": [dict(h) for h in m.contributes.hooks],
            "events": [dict(e) for e in m.contributes.events],
            "actionKinds": [dict(k) for k in m.contributes.action_kinds],
            "runtimes": [r.detail() for r in m.runtimes],
            "entry": m.entry,
        })
        return out


@dataclass
class PluginRegistry:
    """All discovered plugins in discovery order (builtins first), keyed by id."""

    records: dict[str, PluginRecord] = field(default_factory=dict)
    shadowed: list[DiscoveredPlugin] = field(default_factory=list)
    #: Bumped whenever an entry is published after the build (tool registries are rebuilt then).
    generation: int = 0
    _entry_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def entry_ensure(self, plugin_id: str) -> PluginRecord | None:
        """Import a code-pending community entry and publish its registrations (once per process;
        thread-safe). The caller has checked the session's ``covel:plugin-server-code`` grant.
        Returns the record (hostState "loaded", or "error" with ``error`` set when the entry failed)."""
        record = self.records.get(plugin_id)
        if record is None or not record.is_code_pending:
            return record
        with self._entry_lock:
            if record.is_code_pending:
                registrations, issues = _entry_register(record.manifest)
                record.issues.extend(issues)
                if registrations is None:
                    record.host_state = HOST_ERROR
                    first = next((i for i in issues if i.is_error), None)
                    record.error = f"<plugin>/{first.file or PLUGIN_FILE}: {first.message}" if first else "plugin failed to load"
                else:
                    record.registrations = registrations
                    record.host_state = HOST_LOADED
                self.generation += 1
        return record

    def plugin_reload(self, plugin_id: str, *, import_entry: bool) -> PluginRecord:
        """Dev hot reload of one community package (spec 004 POST /api/plugins/:id/reload): read it
        from disk again as a new generation and publish it in place of the old record. With
        ``import_entry`` (the caller checked the session's server-code grant) its entry is imported
        now — with every module of the plugin forgotten first, so helpers are re-read too; otherwise
        it waits code-pending like after a start. Executions that already hold the old record keep
        using its handlers; later ones get the new one (``generation`` bumps: tool registries
        rebuild). Raises PluginReloadFailed (the old generation stays) when the package no longer
        loads. Preconditions: the record exists and is not builtin."""
        from plugins_app.code_loading import plugin_modules_forget
        from plugins_app.errors import PluginReloadFailed

        old = self.records[plugin_id]
        with self._entry_lock:
            fresh = plugin_record_build(DiscoveredPlugin(id=plugin_id, root=old.manifest.root, source=old.source))
            if fresh.host_state == HOST_ERROR:
                raise PluginReloadFailed(plugin_id, fresh.error or "the package does not load")
            if import_entry and fresh.is_code_pending:
                saved = plugin_modules_forget(plugin_id)
                registrations, issues = _entry_register(fresh.manifest)
                if registrations is None:
                    saved.restore()
                    first = next((i for i in issues if i.is_error), None)
                    raise PluginReloadFailed(plugin_id, f"<plugin>/{first.file or PLUGIN_FILE}: {first.message}" if first
                                             else "the entry failed to load")
                fresh.issues.extend(issues)
                fresh.registrations = registrations
                fresh.host_state = HOST_LOADED
            fresh.reload_generation = old.reload_generation + 1
            self.records[plugin_id] = fresh
            self.generation += 1
        return fresh

    def get(self, plugin_id: str) -> PluginRecord | None:
        return self.records.get(plugin_id)

    def all(self) -> list[PluginRecord]:
        return list(self.records.values())

    def loaded(self) -> list[PluginRecord]:
        return [r for r in self.records.values() if r.is_loaded]

    def runtime(self, runtime_id: str) -> RuntimeManifest | None:
        plugin_id = runtime_id.split("/", 1)[0]
        record = self.records.get(plugin_id)
        if record is None:
            return None
        return next((r for r in record.manifest.runtimes if r.id == runtime_id), None)

    def tool(self, plugin_id: str, name: str) -> Registration | None:
        record = self.records.get(plugin_id)
        return record.registrations.tools.get(name) if record and record.is_loaded else None

    def service_providers(self, contract: str) -> list[Registration]:
        return [r.registrations.services[contract] for r in self.loaded() if contract in r.registrations.services]


def _entry_register(manifest: PluginManifest) -> tuple[Registrations | None, list[Issue]]:
    """Run a Python entry's register(api); return (registrations or None, issues)."""
    entry = manifest.entry or ""
    relpath = entry.split(":", 1)[0]
    resolved = package_path_resolve(manifest.root, relpath)
    if resolved is None or not resolved.is_file():
        return None, [error("entry-missing", f"entry module {entry} not found", PLUGIN_FILE, "entry")]
    api = PluginRegistrationApi(manifest)
    try:
        module = module_load_by_path(manifest.root, manifest.id, str(resolved.relative_to(manifest.root.resolve())))
        register = getattr(module, "register", None)
        if not callable(register):
            return None, [error(CODE_ENTRY_FAILED, "entry module defines no register(api) function", PLUGIN_FILE, "entry")]
        register(api)
    except RegistrationError as exc:
        return None, [error(CODE_REGISTRATION_UNDECLARED, str(exc), PLUGIN_FILE, "contributes")]
    except Exception as exc:  # plugin code may raise anything; nothing of it is published
        logger.exception("plugin %s: entry register() failed", manifest.id)
        return None, [error(CODE_ENTRY_FAILED, f"entry register() failed: {exc.__class__.__name__}: {exc}", PLUGIN_FILE, "entry")]
    staged = api.staged
    issues: list[Issue] = []
    c = manifest.contributes
    for kind, declared, registered in (
        ("tools", c.tools, staged.tools), ("actions", c.actions, staged.rpcs),
        ("forms", c.forms, staged.form_validators), ("services", c.services, staged.services),
    ):
        for index, name in enumerate(declared):
            if name not in registered:
                issues.append(error(CODE_CONTRIBUTION_NOT_IMPLEMENTED, f"{name!r} is declared but the entry did not register it", PLUGIN_FILE, f"contributes.{kind}.{index}"))
    for index, hook in enumerate(c.hooks):
        if hook.get("event") not in staged.hooks:
            issues.append(error(CODE_CONTRIBUTION_NOT_IMPLEMENTED, f"hook {hook.get('event')!r} is declared but not registered", PLUGIN_FILE, f"contributes.hooks.{index}"))
    if issues:
        return None, issues
    return staged, []


def _needs_code(manifest: PluginManifest) -> bool:
    c = manifest.contributes
    return bool(c.tools or c.actions or c.forms or c.services or c.hooks)


def plugin_record_build(found: DiscoveredPlugin, *, load_entries: bool = True) -> PluginRecord:
    """Load one discovered package into a PluginRecord (never raises for bad packages)."""
    stamp = _package_stamp(found.root) if found.source != SOURCE_BUILTIN else None
    manifest = plugin_manifest_load(found.root, expected_id=found.id)
    record = PluginRecord(manifest=manifest, source=found.source, host_state=HOST_DISCOVERED, package_stamp=stamp)
    issues = list(manifest.issues)
    if manifest.has_errors:
        record.host_state = HOST_ERROR
    elif manifest.entry_language in ("javascript", "unknown"):
        issues.append(error(CODE_ENTRY_NOT_LOADABLE, f"entry {manifest.entry} is not a Python module; it cannot run in this server", PLUGIN_FILE, "entry"))
        record.host_state = HOST_ERROR
    else:
        # Function runtimes whose handler is not Python cannot run; drop them, keep the plugin.
        kept: list[RuntimeManifest] = []
        for runtime in manifest.runtimes:
            if runtime_handler_language(runtime) not in (None, "python"):
                message = f"function handler {runtime.function.handler} is not a Python module"  # type: ignore[union-attr]
                issues.append(error(CODE_HANDLER_NOT_LOADABLE, message, runtime.source_path, "function.handler"))
                disabled = {"sourcePath": runtime.source_path, "message": f"<plugin>/{runtime.source_path}: {message}"}
                if runtime.output_contract:
                    disabled["outputContract"] = runtime.output_contract
                manifest.disabled_runtimes.append(disabled)
            else:
                kept.append(runtime)
        manifest.runtimes = kept
        if manifest.entry_language == "python":
            if found.source != SOURCE_BUILTIN:
                record.host_state = HOST_INSTALLED  # imported only after a grant (PluginRegistry.entry_ensure)
            elif load_entries:
                registrations, entry_issues = _entry_register(manifest)
                issues.extend(entry_issues)
                if registrations is None:
                    record.host_state = HOST_ERROR
                else:
                    record.registrations = registrations
                    record.host_state = HOST_LOADED
        elif _needs_code(manifest):
            issues.append(error(CODE_CONTRIBUTION_NOT_IMPLEMENTED, "contributes tools/actions/forms/services/hooks but declares no entry", PLUGIN_FILE, "entry"))
            record.host_state = HOST_ERROR
        else:
            record.host_state = HOST_LOADED
    record.issues = issues
    if record.host_state == HOST_ERROR:
        first = next((i for i in issues if i.is_error and (i.file or PLUGIN_FILE) not in {d["sourcePath"] for d in manifest.disabled_runtimes}), None)
        first = first or next((i for i in issues if i.is_error), None)
        record.error = f"<plugin>/{first.file or PLUGIN_FILE}: {first.message}" if first else "plugin failed to load"
        record.registrations = Registrations()
    return record


def registry_build(
    *, builtin_dir: Path | None = None, community_dir: Path | None = None, load_entries: bool = True
) -> PluginRegistry:
    """Discover and load every plugin. See plugins_discover for the directory rules.

    load_entries=False parses manifests only (hostState stays "discovered" for Python entries).
    """
    found, shadowed = plugins_discover(builtin_dir=builtin_dir, community_dir=community_dir)
    registry = PluginRegistry(shadowed=shadowed)
    for item in found:
        if item.source == SOURCE_BUILTIN and load_entries:
            registry.records[item.id] = _builtin_record(item)
        else:
            registry.records[item.id] = plugin_record_build(item, load_entries=load_entries)
    return registry


# Builtin records per process. A builtin package changes only with a restart, and its record (the
# parsed manifest, the imported entry's registrations) is the same for every COVEL_HOME, so every
# registry this process builds — one per home, and again after a registry_reset() (an install
# directory "restart") — shares it instead of parsing ~30 manifests and running their entries
# again (0.2–0.3 s idle, seconds on a loaded machine). Builtin records are never changed after
# the build (entry_ensure and plugin_reload only touch community records). A record is reused
# while its folder and PLUGIN.md keep the stamp it was built from, and only when both were last
# changed more than BUILTIN_RACY_SECONDS before the build (a folder written in the same clock
# tick as the read could keep its stamp; tests write throw-away builtin folders).
BUILTIN_RACY_SECONDS = 0.25  # as sessions.world_packages.RACY_SECONDS (file timestamp ticks)
BUILTIN_RECORDS_KEPT = 512
_builtin_records: dict[tuple[str, str], tuple[tuple[int, ...], PluginRecord]] = {}
_builtin_lock = threading.Lock()


def _builtin_stamp(root: Path) -> tuple[tuple[int, ...], float] | None:
    try:
        folder, manifest = root.stat(), (root / PLUGIN_FILE).stat()
    except OSError:
        return None
    stamp = (folder.st_ino, folder.st_mtime_ns, folder.st_ctime_ns, manifest.st_ino, manifest.st_size,
             manifest.st_mtime_ns, manifest.st_ctime_ns)
    return stamp, max(folder.st_mtime_ns, folder.st_ctime_ns, manifest.st_mtime_ns, manifest.st_ctime_ns) / 1e9


def _builtin_record(found: DiscoveredPlugin) -> PluginRecord:
    """The builtin record for ``found``: the one this process built already, or a new build."""
    import time

    key = (str(found.root), found.id)
    stamped = _builtin_stamp(found.root)
    if stamped is not None:
        with _builtin_lock:
            cached = _builtin_records.get(key)
        if cached is not None and cached[0] == stamped[0]:
            return cached[1]
    record = plugin_record_build(found)
    if stamped is not None and stamped[1] < time.time() - BUILTIN_RACY_SECONDS:
        with _builtin_lock:
            _builtin_records.pop(key, None)
            _builtin_records[key] = (stamped[0], record)
            while len(_builtin_records) > BUILTIN_RECORDS_KEPT:  # builtin dirs other than the shipped one
                del _builtin_records[next(iter(_builtin_records))]
    return record


_cache: dict[str, tuple[PluginRegistry, tuple[int, int] | None]] = {}
_cache_lock = threading.Lock()
_started_homes: set[str] = set()

#: The registry generation marker (spec 004 安装后的重启和刷新): a file in the community plugin
#: directory that every install, update and uninstall replaces (os.replace: a new inode each
#: time). Every process — each hosted web process and every worker — compares its stat with the
#: one its cached registry was built from, so they all pick up installed/uninstalled packages at
#: their next registry read without a restart of each. Plugin files live in the same directory, so
#: every process that can load a plugin also sees this file; one stat per read is the whole cost.
REGISTRY_GENERATION_FILE = ".registry-generation"


def _generation_stamp(community: Path | None) -> tuple[int, int] | None:
    if community is None:
        return None
    try:
        stat = (community / REGISTRY_GENERATION_FILE).stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns)


def registry_generation_bump(covel_home: Path | str) -> None:
    """Tell every process to rebuild its registry at its next read (after an install, update or
    uninstall under ``covel_home``). Writes ``plugins/.registry-generation`` atomically."""
    import os
    import uuid

    community = Path(covel_home) / "plugins"
    community.mkdir(parents=True, exist_ok=True)
    temporary = community / f".registry-generation.{uuid.uuid4().hex}"
    temporary.write_text(uuid.uuid4().hex, encoding="utf-8")
    os.replace(temporary, community / REGISTRY_GENERATION_FILE)


def registry_get(*, covel_home: Path | str | None, builtin_dir: Path | None = None) -> PluginRegistry:
    """Process-wide registry snapshot for (COVEL_HOME, builtin dir); built once, then cached until
    the registry generation marker changes (``registry_generation_bump``, any process) or
    ``registry_reset()``.

    Spec 004: GET requests never rediscover plugins themselves. The first build of a process (its
    start) also runs the start-up steps of the install directory (``_start_steps``).
    Executions that already hold the old registry keep it; later reads get the new one.
    """
    key = f"{covel_home}|{builtin_dir}"
    community = Path(covel_home) / "plugins" if covel_home is not None else None
    stamp = _generation_stamp(community)
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None and cached[1] == stamp:
            return cached[0]
        if community is not None and key not in _started_homes:
            _started_homes.add(key)
            _start_steps(community)
            stamp = _generation_stamp(community)
        if cached is None:
            registry = registry_build(builtin_dir=builtin_dir, community_dir=community)
        else:
            registry = _registry_refreshed(cached[0], builtin_dir=builtin_dir, community_dir=community)
        _cache[key] = (registry, stamp)
        return registry


def _package_stamp(root: Path) -> tuple[int, int, int] | None:
    try:
        folder, manifest = root.stat(), (root / PLUGIN_FILE).stat()
    except OSError:
        return None
    return (folder.st_ino, folder.st_mtime_ns, manifest.st_mtime_ns)


def _registry_refreshed(old: PluginRegistry, *, builtin_dir: Path | None, community_dir: Path | None) -> PluginRegistry:
    """A registry for the install directory as it is now, reusing what cannot have changed:
    builtin records (they change only with a restart) and community records whose folder and
    PLUGIN.md are the same as when they were built (an entry this process imported stays
    imported). New, replaced and removed community packages are discovered again."""
    found, shadowed = plugins_discover(builtin_dir=builtin_dir, community_dir=community_dir)
    registry = PluginRegistry(shadowed=shadowed, generation=old.generation + 1)
    for item in found:
        previous = old.records.get(item.id)
        reusable = previous is not None and previous.source == item.source and (
            item.source == SOURCE_BUILTIN
            or (previous.manifest.root == item.root and previous.package_stamp is not None
                and previous.package_stamp == _package_stamp(item.root)))
        registry.records[item.id] = previous if reusable else plugin_record_build(item)
    return registry


def _start_steps(community: Path) -> None:
    """Start-up work on the community directory (spec 004 DELETE /api/plugins/:id: 清理失败 … 下次
    启动重试清理; plugin updates staged by POST /api/install/plugin/github/update are promoted
    before discovery; see plugins_app.install_dir). Never raises."""
    from plugins_app.install_dir import install_dir_start

    try:
        if install_dir_start(community):
            registry_generation_bump(community.parent)
    except Exception:  # a start-up step must not keep the server from listing plugins
        logger.exception("plugin install directory start-up steps failed")


def plugin_registry() -> PluginRegistry:
    """The process-wide PluginRegistry of this server: builtin plugins (``COVEL_BUILTIN_PLUGINS_DIR``
    when set, else ``plugins_app/builtin``) and community plugins under ``COVEL_HOME/plugins``.
    Cached; ``registry_reset()`` rebuilds it."""
    from django.conf import settings

    builtin = settings.COVEL_BUILTIN_PLUGINS_DIR
    return registry_get(covel_home=settings.COVEL_HOME, builtin_dir=Path(builtin) if builtin else None)


def registry_reset(*, builtin_records: bool = False) -> None:
    """Drop cached registries (after install/uninstall, and between tests): the next read
    discovers the install directories again and re-runs their start-up steps, as a restart does.
    Builtin records are kept (they change only with a restart of the process, see
    ``_builtin_record``) unless ``builtin_records`` is true."""
    with _cache_lock:
        _cache.clear()
        _started_homes.clear()
    if builtin_records:
        with _builtin_lock:
            _builtin_records.clear()


__all__ = [
    "HOST_DISCOVERED", "HOST_ERROR", "HOST_INSTALLED", "HOST_LOADED", "PluginRecord", "PluginRegistrationApi",
    "PluginRegistry", "Registration", "RegistrationError", "Registrations", "SOURCE_BUILTIN",
    "REGISTRY_GENERATION_FILE", "plugin_record_build", "plugin_registry", "registry_build", "registry_generation_bump",
    "registry_get", "registry_reset",
]
