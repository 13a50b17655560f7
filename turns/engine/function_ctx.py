"""The host API of function runtimes: the members of ``ctx`` beyond the turn's facts (spec 000
§Function runtime 调用工具 and §第三方插件 server-code 审批边界 "工具和 guard 能拿到什么"; spec 004
§写入什么时候生效, §图像/媒体生成输出, §Suspend / Resume, the runtime-event tables of §SSE 协议).
The plugin author's reference is docs/function-runtime-ctx.md.

- ``ctx.plugin_data`` (alias ``pluginData``): get / list / set / update / delete of the runtime's
  own plugin. Writes are staged as proposals and committed with the runtime's success; each is
  checked first against the plugin's ``contributes.datasets`` declaration for that namespace (the
  op must be declared, the resulting record must match the record schema) and raises
  ``PluginDataRejected`` (code ``dataset-violation``) before anything is staged.
- ``ctx.gateway``: one model call on a configured slot through the provider layer (ModelRouter:
  keys, fallback, outbound policy) with ``gateway.calling/responded/failed`` traces (forwarded to
  the action stream) and the usage added to the runtime's.
- ``ctx.recursive_call`` (alias ``recursiveCall``): run another function runtime of the same
  plugin inside this execution; its writes join the caller's staged writes (committed with the
  caller, dropped with it, kept with its suspension); ``recursive.*`` traces.
- ``ctx.utils.fetch_with_retry`` (alias ``fetchWithRetry``): HTTP through covel.outbound as a
  request-supplied target (SSRF guard on resolved addresses, no keys) plus, for community
  runtimes, the runtime's ``permissions.http`` allow-list. Never follows a redirect: a 3xx raises
  ``FetchError`` (``redirect-refused``) unless ``redirect="manual"``, which hands the 3xx back.
  ``utils.fetch.*`` traces (not forwarded).
- ``ctx.media.put`` / ``ctx.media.ingest_url`` (``ingestUrl``): bytes or a remote URL into the
  session's media library (through ``ports.media_put``); ingest follows at most ``max_redirects``
  hops itself, re-checking every Location against the SSRF guard and ``permissions.http``.
- ``ctx.agents.run(target, brief, *, data, character, instruction, max_steps)``: run a sub-agent
  exactly as the ``delegate`` tool does (turns.engine.delegate: same targets, character rules,
  8-at-once and ``maxSubagentCalls`` limits); returns its raw output, its writes join the caller's
  staged writes; raises ``AgentRunFailed`` with delegate's codes.
- ``ctx.progress``: ``report(progress, message)`` appends ``job-status.updated`` for the runtime's
  progress job; the job ends with the runtime (succeeded / failed, ``waiting-input`` while the
  runtime is suspended).
"""
from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping
from urllib.parse import urljoin, urlsplit, urlunsplit

from covel import outbound
from covel.jsoncopy import json_copy
from plugins_app.manifests import RuntimeManifest
from plugins_app.toolkit import proposals as P
from plugins_app.toolkit.definition import RuntimeValidator, schema_problem
from turns.engine import ports
from turns.engine import trace as T
from turns.engine.env import ExecutionEnv
from turns.engine.providers.base import ModelError, ModelRequest, response_collect
from turns.engine.providers.config import slot_for_runtime
from turns.engine.runtime import STATUS_SUCCESS, RuntimeFailure, RuntimeResult, TurnInfo
from turns.engine.state import EngineStateView, StagedProposals
from turns.engine.tools.dataops import DataOpError, apply_data_ops

DATASET_VIOLATION = "dataset-violation"
HTTP_PERMISSION_DENIED = "http-permission-denied"
REDIRECT_REFUSED = "redirect-refused"
#: Nesting limit of recursiveCall (a runtime calling itself would otherwise never end).
RECURSIVE_MAX_DEPTH = 4
#: Largest body fetchWithRetry / ingestUrl reads (the media library's upload limit).
FETCH_MAX_BYTES = 20 * 1024 * 1024
FETCH_RETRY_STATUSES = (429, 500, 502, 503, 504)
FETCH_BACKOFF_SECONDS = 0.2
FETCH_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class PluginDataRejected(RuntimeFailure):
    """A ctx.plugin_data write the plugin's dataset declaration refuses (nothing was staged). A
    handler may catch it; uncaught it fails the runtime with code ``dataset-violation``."""

    def __init__(self, message: str) -> None:
        super().__init__(DATASET_VIOLATION, message)


class HostCallFailed(Exception):
    """A ctx.gateway / utils / media / recursiveCall call that failed. ``code`` / ``message`` are
    safe to show; ``status`` is the HTTP status when one came back. A handler may catch it."""

    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class GatewayError(HostCallFailed):
    """ctx.gateway failed (ModelError codes: provider_error, no_key, unreachable, ...)."""


class FetchError(HostCallFailed):
    """ctx.utils.fetch_with_retry / ctx.media.ingest_url failed (``http-permission-denied``,
    ``redirect-refused``, ``too_many_redirects``, ``target_not_allowed``, ``unreachable``, ...)."""


class MediaError(HostCallFailed):
    """ctx.media refused the bytes (``empty_body``, ``invalid_image``, ``unsupported_media_type``, ``too_large``)."""


class AgentRunFailed(HostCallFailed):
    """ctx.agents.run failed: ``code`` is one of delegate's (invalid-input, not-found, ambiguous,
    unavailable, timeout, cancelled, internal); nothing of the sub-agent was staged."""


class RecursiveCallFailed(HostCallFailed):
    """ctx.recursive_call's target failed, suspended, or may not be called from here."""


# --- pluginData ------------------------------------------------------------------------------------


class PluginDataApi:
    """ctx.plugin_data: the runtime's own plugin's data (reads include its staged writes)."""

    def __init__(self, env: ExecutionEnv, view: EngineStateView, own: StagedProposals, plugin_id: str, runtime_id: str) -> None:
        self._env, self._view, self._own, self._plugin_id, self._runtime_id = env, view, own, plugin_id, runtime_id
        self._validators: dict[str, Any] = {}

    def get(self, namespace: str, key: str, default: Any = None) -> Any:
        exists, value = self._view.plugin_data_get(self._plugin_id, namespace, key)
        return json_copy(value) if exists else default

    def list(self, namespace: str) -> dict[str, Any]:
        return json_copy(self._view.plugin_data_list(self._plugin_id, namespace))

    def set(self, namespace: str, key: str, value: Any) -> None:
        """Stage ``namespace/key = value``. Raises PluginDataRejected (undeclared ``set`` op, schema)."""
        self._check(namespace, "set", value)
        self._stage(P.Proposal(P.PLUGIN_DATA, {"namespace": namespace, "key": key, "value": json_copy(value)}))

    def update(self, namespace: str, key: str, ops: list[dict[str, Any]]) -> Any:
        """Stage data ops (``[{op: set|merge|delete|append|increment..., path?, value?}]``, spec 000
        数据集工具) on the current value; returns the resulting value. Raises PluginDataRejected
        (an op the dataset does not declare, a failing op, a result outside the record schema)."""
        if not isinstance(ops, list) or not ops:
            raise PluginDataRejected("update needs a non-empty list of ops")
        exists, current = self._view.plugin_data_get(self._plugin_id, namespace, key)
        try:
            present, value = apply_data_ops(exists, current, json_copy(ops))
        except DataOpError as exc:
            raise PluginDataRejected(f"{namespace}/{key}: {exc}") from None
        for op in ops:
            self._check(namespace, str(op.get("op")), value if present else None, validate=False)
        if present:
            self._check(namespace, None, value)
        self._stage(P.Proposal(P.PLUGIN_DATA_UPDATE, {"namespace": namespace, "key": key, "ops": json_copy(ops)}))
        return json_copy(value) if present else None

    def delete(self, namespace: str, key: str) -> None:
        self._check(namespace, "delete", None, validate=False)
        self._stage(P.Proposal(P.PLUGIN_DATA_DELETE, {"namespace": namespace, "key": key}))

    def _check(self, namespace: str, op: str | None, value: Any, *, validate: bool = True) -> None:
        declaration = self._env.datasets(self._plugin_id).get(namespace) if isinstance(namespace, str) else None
        if declaration is None:
            return  # an undeclared namespace is free-form plugin data
        if op is not None and op not in declaration.ops and not (op == "delete" and "set" in declaration.ops):
            raise PluginDataRejected(f"dataset {namespace} does not allow {op}")
        if not validate:
            return
        validator = self._validators.get(namespace)
        if validator is None and not schema_problem(declaration.schema):
            validator = self._validators[namespace] = RuntimeValidator(declaration.schema)
        if validator is not None:
            error = next(iter(validator.iter_errors(value)), None)
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "(record)"
                raise PluginDataRejected(f"the record does not match dataset {namespace} at {where}: {error.message}")

    def _stage(self, proposal: P.Proposal) -> None:
        proposal.plugin_id, proposal.runtime_id = self._plugin_id, self._runtime_id
        try:
            proposal.payload = P.proposal_validate(proposal)
        except P.ProposalInvalid as exc:
            raise RuntimeFailure("proposal-invalid", str(exc)) from None
        self._own.extend([proposal])


# --- gateway ---------------------------------------------------------------------------------------


class GatewayApi:
    """ctx.gateway: ``generate(messages=None, *, prompt=None, system=None, slot=None, model=None,
    max_output_tokens=None) -> {text, usage: {input, output}, model, slot, provider, finishReason}``.

    ``slot`` names an llm.toml slot (default: the runtime's own, i.e. ``runtimeModelOverrides`` >
    the ``plugin`` slot); ``model`` overrides the slot's model id. No tools are offered. Raises
    GatewayError with the provider's code. Traces: gateway.calling {slot, provider, model,
    messageCount}, gateway.responded {..., usage, durationMs, text}, gateway.failed {..., error,
    usage}."""

    def __init__(self, env: ExecutionEnv, runtime: RuntimeManifest, emit: Callable[[str, dict], None], result: RuntimeResult) -> None:
        self._env, self._runtime, self._emit, self._result = env, runtime, emit, result
        self._calls = 0

    def generate(self, messages: list[dict[str, Any]] | None = None, *, prompt: str | None = None, system: str | None = None,
                 slot: str | None = None, model: str | None = None, max_output_tokens: int | None = None) -> dict[str, Any]:
        sent: list[dict[str, Any]] = []
        if system:
            sent.append({"role": "system", "content": str(system)})
        for message in messages or []:
            if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
                raise GatewayError("invalid-input", "messages[] items are {role: system|user|assistant, content}")
            sent.append({"role": message["role"], "content": str(message.get("content") or "")})
        if prompt:
            sent.append({"role": "user", "content": str(prompt)})
        if not any(m["role"] == "user" for m in sent):
            raise GatewayError("invalid-input", "a gateway call needs a user message (messages or prompt)")
        config = self._env.router.config
        try:
            if slot:
                if not config.has_slot(slot):
                    raise GatewayError("not_configured", f"no model slot {slot!r} is configured")
                slot_config, model_id = config.slot(slot), config.slot(slot).model
            else:
                slot_config, model_id = slot_for_runtime(
                    config=config, runtime_id=self._runtime.id, is_story=False,
                    request_model=self._env.request_model, overrides=self._env.snapshot.runtime_model_overrides)
        except KeyError:
            raise GatewayError("not_configured", "no model slot is configured") from None
        model_id = model or model_id
        self._calls += 1
        call_id = f"gw-{self._calls}"
        head = {"callId": call_id, "slot": slot_config.name, "provider": slot_config.provider, "model": model_id,
                "messageCount": len(sent)}
        self._emit(T.GATEWAY_CALLING, head)
        if slot_config.provider != "scripted":
            self._env.tracer.flush()  # the call waits on the network: the client sees gateway.calling now
        started = time.monotonic()
        request = ModelRequest(messages=sent, slot=slot_config.name, model=model_id, max_output_tokens=max_output_tokens,
                               context={"runtime_id": self._runtime.id, "plugin_id": self._runtime.plugin_id,
                                        "locale": self._env.snapshot.locale, "is_story": False, "gateway": True})
        try:
            response = response_collect(self._env.router.stream(slot_config, model_id, request))
        except ModelError as exc:
            self._emit(T.GATEWAY_FAILED, {**head, "error": {"code": exc.code, "message": exc.message},
                                          "usage": {"input": 0, "output": 0},
                                          "durationMs": int((time.monotonic() - started) * 1000)})
            raise GatewayError(exc.code, exc.message, status=exc.status) from None
        usage = response.usage.to_json()
        self._result.usage["input"] += response.usage.input_tokens
        self._result.usage["output"] += response.usage.output_tokens
        self._result.model_slot = self._result.model_slot or slot_config.name
        self._emit(T.GATEWAY_RESPONDED, {**head, "model": response.model or model_id, "usage": usage, "text": response.text,
                                         "finishReason": response.finish_reason,
                                         "durationMs": int((time.monotonic() - started) * 1000)})
        return {"text": response.text, "usage": usage, "model": response.model or model_id, "slot": slot_config.name,
                "provider": slot_config.provider, "finishReason": response.finish_reason}

    generateText = generate  # noqa: N815 - the spec's camelCase spelling
    generate_text = generate


# --- utils.fetchWithRetry ---------------------------------------------------------------------------


@dataclass
class FetchResponse:
    """What fetch_with_retry returns: ``status``, ``headers`` (lower-cased names), ``body`` (bytes),
    ``url`` (the request URL), ``attempts``; ``ok`` (2xx), ``text()``, ``json()``, ``location``."""

    status: int
    headers: dict[str, str]
    body: bytes
    url: str
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def location(self) -> str | None:
        return self.headers.get("location")

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body or b"null")


def _traced_url(url: str) -> str:
    """The URL without query and fragment (signed URLs carry secrets in the query)."""
    try:
        parts = urlsplit(url)
        return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
    except ValueError:
        return "(unparseable)"


def http_permissions(runtime: RuntimeManifest) -> list[tuple[str, frozenset[str] | None]]:
    """The runtime's ``permissions.http`` entries as (origin, methods or None = any): a string is
    an origin; ``{origin, methods?}`` names the methods too. Wildcards are not origins."""
    declared = runtime.permissions.get("http") if isinstance(runtime.permissions, dict) else None
    out: list[tuple[str, frozenset[str] | None]] = []
    for item in declared if isinstance(declared, list) else []:
        origin_text, methods = (item, None) if isinstance(item, str) else (
            (item.get("origin"), item.get("methods")) if isinstance(item, dict) else (None, None))
        origin = outbound.origin_of(origin_text) if isinstance(origin_text, str) else None
        if origin is None:
            continue
        allowed = frozenset(str(m).upper() for m in methods) if isinstance(methods, list) and methods else None
        out.append((origin, allowed))
    return out


class UtilsApi:
    """ctx.utils: ``fetch_with_retry(url, *, method="GET", headers=None, json=None, body=None,
    redirect="error", retries=2, timeout_seconds=15.0) -> FetchResponse``.

    Every attempt goes through covel.outbound as a request-supplied target (resolved-address SSRF
    guard, no server keys). Community runtimes may reach only the origins (and methods) their
    ``permissions.http`` declares; builtin runtimes are not held to the list. 429 / 5xx answers and
    unreachable targets are retried ``retries`` times with exponential backoff (0.2 s, 0.4 s, ...);
    other answers are returned as they are (check ``ok``). A 3xx raises FetchError
    ``redirect-refused`` unless ``redirect="manual"`` (then it is returned and the caller checks the
    next hop). Raises FetchError (``http-permission-denied``, ``target_not_allowed``,
    ``unreachable``, ``too_large``, ``invalid-input``)."""

    def __init__(self, env: ExecutionEnv, runtime: RuntimeManifest, emit: Callable[[str, dict], None]) -> None:
        self._env, self._runtime, self._emit = env, runtime, emit
        record = env.plugin(runtime.plugin_id)
        self._is_community = record is not None and record.needs_code_grant
        self._permissions = http_permissions(runtime)

    def http_check(self, url: str, method: str) -> None:
        """Raise FetchError ``http-permission-denied`` when a community runtime may not send
        ``method`` to ``url``'s origin (spec 004: ctx.media 和 ctx.utils 共用同一套 permissions.http 检查)."""
        origin = outbound.origin_of(url)
        if origin is None:
            raise FetchError("invalid-input", "only http(s) URLs with a host can be fetched")
        if not self._is_community:
            return
        for allowed, methods in self._permissions:
            if allowed == origin and (methods is None or method in methods):
                return
        raise FetchError(HTTP_PERMISSION_DENIED, f"http permission denied: {method} {origin}")

    def fetch_with_retry(self, url: str, *, method: str = "GET", headers: Mapping[str, str] | None = None, json: Any = None,
                         body: bytes | str | None = None, redirect: str = "error", retries: int = 2,
                         timeout_seconds: float = 15.0) -> FetchResponse:
        method = str(method or "GET").upper()
        if method not in FETCH_METHODS:
            raise FetchError("invalid-input", f"method {method} is not supported")
        if redirect not in ("error", "follow", "manual"):
            raise FetchError("invalid-input", 'redirect is "error", "follow" or "manual"')
        retries = max(0, min(int(retries), 5))
        head = {"url": _traced_url(url), "method": method}
        self._emit(T.UTILS_FETCH_CALLING, head)
        self._env.tracer.flush()  # the fetch waits on the network
        started = time.monotonic()
        try:
            response = self._attempts(url, method=method, headers=headers, json=json, body=body, retries=retries,
                                      timeout_seconds=timeout_seconds)
            if response.status in outbound.REDIRECT_STATUSES and redirect != "manual":
                raise FetchError(REDIRECT_REFUSED, f"the server answered {response.status} (a redirect); redirects are "
                                 'never followed, pass redirect="manual" to check the next hop yourself',
                                 status=response.status)
        except FetchError as exc:
            self._emit(T.UTILS_FETCH_FAILED, {**head, "error": {"code": exc.code, "message": exc.message},
                                              "durationMs": int((time.monotonic() - started) * 1000)})
            raise
        self._emit(T.UTILS_FETCH_RESPONDED, {**head, "status": response.status, "attempts": response.attempts,
                                             "bytes": len(response.body), "durationMs": int((time.monotonic() - started) * 1000)})
        return response

    fetchWithRetry = fetch_with_retry  # noqa: N815 - the spec's spelling

    def _attempts(self, url: str, *, method: str, headers, json, body, retries: int, timeout_seconds: float) -> FetchResponse:
        self.http_check(url, method)
        sent_headers = dict(headers or {})
        if body is not None:
            # covel.outbound.send carries JSON bodies only; a raw body is refused, never dropped.
            raise FetchError("invalid-input", "raw request bodies are not supported; pass json")
        attempt = 0
        while True:
            attempt += 1
            if self._env.cancel.is_cancelled:
                raise FetchError("cancelled", "the execution was cancelled")
            try:
                with outbound.send(method, url, is_request_supplied=True, json=json, headers=sent_headers,
                                   timeout=timeout_seconds, max_redirects=0) as raw:
                    data = outbound.read_limited(raw, FETCH_MAX_BYTES)
                    response = FetchResponse(status=raw.status_code, headers={k.lower(): v for k, v in raw.headers.items()},
                                             body=data, url=url, attempts=attempt)
            except outbound.TargetRefused as exc:
                raise FetchError(exc.code, exc.message) from None
            except outbound.OutboundError as exc:
                if exc.code == outbound.CODE_TOO_LARGE or attempt > retries:
                    raise FetchError(exc.code, exc.message) from None
                self._backoff(attempt)
                continue
            except Exception as exc:  # httpx errors while reading the body
                if attempt > retries:
                    raise FetchError(outbound.CODE_UNREACHABLE, f"the response could not be read ({type(exc).__name__})") from None
                self._backoff(attempt)
                continue
            if response.status in FETCH_RETRY_STATUSES and attempt <= retries:
                self._backoff(attempt)
                continue
            return response

    def _backoff(self, attempt: int) -> None:
        self._env.cancel.wait(min(FETCH_BACKOFF_SECONDS * (2 ** (attempt - 1)), 5.0))


# --- media -----------------------------------------------------------------------------------------


class MediaApi:
    """ctx.media: ``put(data, *, mime=None) -> MediaRef`` and ``ingest_url(url, *, max_redirects=5,
    mime=None) -> MediaRef`` where MediaRef is ``{id, mime, sha256, sizeBytes}``.

    ``data``: bytes, a base64 string or a ``data:`` URL. ``ingest_url`` fetches with
    ``redirect="manual"`` and follows at most ``max_redirects`` hops itself, each Location checked
    again (SSRF guard and permissions.http) before it is requested. Raises MediaError / FetchError."""

    def __init__(self, env: ExecutionEnv, utils: UtilsApi) -> None:
        self._env, self._utils = env, utils

    def put(self, data: bytes | str, *, mime: str | None = None) -> dict[str, Any]:
        raw = self._decode(data)
        try:
            return ports.media_put(session_id=self._env.snapshot.session_id, data=raw, declared_type=mime)
        except ports.PortMissing:
            raise
        except Exception as exc:  # the store's ApiError (MediaInvalid, SessionDeleting)
            raise MediaError(str(getattr(exc, "code", None) or "media-rejected"), str(getattr(exc, "message", exc))) from None

    def ingest_url(self, url: str, *, max_redirects: int = outbound.MAX_REDIRECTS, mime: str | None = None) -> dict[str, Any]:
        current = url
        for hop in range(max(0, int(max_redirects)) + 1):
            response = self._utils.fetch_with_retry(current, redirect="manual")
            if response.status in outbound.REDIRECT_STATUSES and response.location:
                current = urljoin(current, response.location)
                continue
            if not response.ok:
                raise FetchError("fetch-failed", f"the media URL answered {response.status}", status=response.status)
            return self.put(response.body, mime=mime or response.headers.get("content-type"))
        raise FetchError(outbound.CODE_TOO_MANY_REDIRECTS, f"the media URL redirected more than {max_redirects} times")

    ingestUrl = ingest_url  # noqa: N815 - the spec's spelling

    @staticmethod
    def _decode(data: bytes | str) -> bytes:
        if isinstance(data, (bytes, bytearray, memoryview)):
            return bytes(data)
        if isinstance(data, str):
            text = data.split(",", 1)[1] if data.startswith("data:") and "," in data else data
            try:
                return base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise MediaError("invalid-input", "a string is read as base64 (or a data: URL) and this one is not") from None
        raise MediaError("invalid-input", "media.put takes bytes, base64 text or a data: URL")


def asset_generations_read(value: dict[str, Any], plugin_id: str, runtime_id: str) -> list[P.Proposal]:
    """The ``asset.generate`` proposals of a handler result's ``effects.assetGenerations[]`` (spec 004
    §图像/媒体生成输出): each item ``{ref: {id, mime, sha256}, modality?, meta?}``; the ref must come
    from ctx.media (no url / base64 / dataUrl). Raises RuntimeFailure ``output_invalid``."""
    effects = value.get("effects") if isinstance(value.get("effects"), dict) else {}
    items = effects.get("assetGenerations")
    if items is None:
        return []
    if not isinstance(items, list):
        raise RuntimeFailure("output_invalid", "effects.assetGenerations must be an array")
    out: list[P.Proposal] = []
    for index, item in enumerate(items):
        ref = item.get("ref") if isinstance(item, dict) else None
        if not isinstance(ref, dict) or not all(isinstance(ref.get(k), str) and ref[k] for k in ("id", "mime", "sha256")):
            raise RuntimeFailure("output_invalid", f"effects.assetGenerations[{index}].ref needs id, mime and sha256 "
                                 "(store provider output with ctx.media.put / ingestUrl first)")
        if any(k in ref for k in ("url", "base64", "dataUrl")):
            raise RuntimeFailure("output_invalid", f"effects.assetGenerations[{index}].ref may hold only a MediaRef")
        modality = item.get("modality") if isinstance(item.get("modality"), str) and item["modality"] else "image"
        meta = item.get("meta") if isinstance(item.get("meta"), dict) else {}
        payload = {"kind": modality, "modality": modality, "ref": {k: ref[k] for k in ("id", "mime", "sha256")},
                   "meta": json_copy(meta)}
        if "prompt" in meta:
            payload["prompt"] = meta["prompt"]
        proposal = P.Proposal(P.ASSET_GENERATE, payload, plugin_id=plugin_id, runtime_id=runtime_id)
        try:
            proposal.payload = P.proposal_validate(proposal)
        except P.ProposalInvalid as exc:
            raise RuntimeFailure("proposal-invalid", str(exc)) from None
        out.append(proposal)
    return out


# --- progress --------------------------------------------------------------------------------------


class ProgressApi:
    """ctx.progress: ``report(progress=None, message=None)`` — one ``job-status.updated`` frame
    ``{jobId, kind: "progress", runtimeId, pluginId, status: "running", progress (0..100), message}``
    (forwarded to the action stream and kept in the trace). The runtime's end closes the job:
    ``succeeded`` / ``failed``, or ``waiting-input`` while the runtime is suspended."""

    def __init__(self, runtime: RuntimeManifest, emit: Callable[[str, dict], None], run_id: str,
                 carried_job_id: str | None = None) -> None:
        self._runtime, self._emit = runtime, emit
        self.job_id = carried_job_id or f"progress-{run_id or uuid.uuid4().hex}"
        #: A resumed run continues the job its suspended run reported (spec 004 §Suspend / Resume: the
        #: suspension chain's jobs end together); it ends it even without reporting again.
        self.is_carried = carried_job_id is not None
        self.is_started = self.is_carried
        self.last: float | None = None

    def report(self, progress: float | int | None = None, message: str | None = None) -> None:
        if progress is not None:
            if not isinstance(progress, (int, float)) or isinstance(progress, bool):
                raise HostCallFailed("invalid-input", "progress is a number from 0 to 100")
            progress = max(0.0, min(100.0, float(progress)))
            self.last = progress
        self.is_started = True
        self._frame("running", progress, message)

    def finish(self, status: str) -> None:
        """Close the job (called by the host when the runtime ends); no frame when never reported.
        A failed resumed run leaves a carried job ``waiting-input`` (the resume may be retried)."""
        if self.is_carried and status == "failed":
            status = "waiting-input"
        if self.is_started:
            self._frame(status, 100.0 if status == "succeeded" else self.last, None)

    def _frame(self, status: str, progress: float | None, message: str | None) -> None:
        payload: dict[str, Any] = {"jobId": self.job_id, "kind": "progress", "status": status}
        if progress is not None:
            payload["progress"] = progress
        if message:
            payload["message"] = str(message)[:500]
        self._emit(T.JOB_STATUS_UPDATED, payload)


# --- recursiveCall ---------------------------------------------------------------------------------


RunFunction = Callable[..., RuntimeResult]


class RecursiveApi:
    """ctx.recursive_call(runtime_id, *, inputs=None, payload=None) -> the target's output.

    The target is another function runtime of the same plugin (spec 000: recursiveCall 的包内调用规则),
    run now with the caller's staged writes visible; on success its writes join the caller's and
    commit (or are dropped, or wait with a suspension) with them. ``payload`` becomes the target's
    ``ctx.manual_payload``, ``inputs`` its ``ctx.inputs``. Traces recursive.calling {targetRuntimeId,
    depth}, recursive.completed {targetRuntimeId, status, durationMs, writes}, recursive.failed
    {targetRuntimeId, error}. Raises RecursiveCallFailed (target unknown / other plugin / not a
    function runtime / depth over 4 / it failed or suspended); the caller's writes are untouched."""

    def __init__(self, env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, upstream: list[P.Proposal],
                 own: StagedProposals, emit: Callable[[str, dict], None], result: RuntimeResult, run: RunFunction,
                 depth: int) -> None:
        self._env, self._runtime, self._turn, self._upstream, self._own = env, runtime, turn, upstream, own
        self._emit, self._result, self._run, self._depth = emit, result, run, depth

    def __call__(self, runtime_id: str, *, inputs: dict[str, Any] | None = None, payload: Any = None) -> Any:
        head = {"targetRuntimeId": runtime_id, "depth": self._depth + 1}
        self._emit(T.RECURSIVE_CALLING, head)
        started = time.monotonic()
        try:
            target = self._target(runtime_id)
            turn = replace(self._turn, manual_payload=json_copy(payload))
            child = self._run(self._env, target, turn, upstream=list(self._upstream) + self._own.items(),
                              inputs=json_copy(inputs or {}), run_id=f"{self._result.run_id}:{runtime_id}",
                              depth=self._depth + 1)
            if child.status != STATUS_SUCCESS:
                error = child.error or {"code": child.status, "message": f"the runtime ended {child.status}"}
                if child.status != "failed":
                    error = {"code": "recursive-suspended", "message": "a recursively called runtime may not suspend"}
                raise RecursiveCallFailed(str(error.get("code")), str(error.get("message")))
        except RecursiveCallFailed as exc:
            self._emit(T.RECURSIVE_FAILED, {**head, "error": {"code": exc.code, "message": exc.message},
                                            "durationMs": int((time.monotonic() - started) * 1000)})
            raise
        self._own.extend(child.proposals)
        self._result.usage["input"] += child.usage.get("input", 0)
        self._result.usage["output"] += child.usage.get("output", 0)
        self._emit(T.RECURSIVE_COMPLETED, {**head, "status": child.status, "writes": len(child.proposals),
                                           "durationMs": int((time.monotonic() - started) * 1000)})
        return json_copy(child.output)

    def _target(self, runtime_id: str) -> RuntimeManifest:
        if self._depth + 1 > RECURSIVE_MAX_DEPTH:
            raise RecursiveCallFailed("recursion-too-deep", f"recursiveCall nests at most {RECURSIVE_MAX_DEPTH} levels")
        manifest = self._env.manifest(self._runtime.plugin_id)
        target = next((r for r in (manifest.runtimes if manifest else []) if r.id == runtime_id), None)
        if target is None:
            owner = runtime_id.split("/", 1)[0]
            code = "cross-package" if owner != self._runtime.plugin_id else "not-found"
            raise RecursiveCallFailed(code, f"{runtime_id} is not a runtime of {self._runtime.plugin_id} "
                                      "(recursiveCall stays inside the package; use services or events across packages)")
        if target.function is None:
            raise RecursiveCallFailed("not-a-function-runtime", f"{runtime_id} is not a function runtime")
        denial = self._env.code_denial(target.plugin_id, target.id)
        if denial is not None:
            raise RecursiveCallFailed("approval_required", f"{runtime_id} needs the approval {denial}")
        return target

    recursiveCall = __call__  # noqa: N815


# --- agents.run ------------------------------------------------------------------------------------


class AgentsApi:
    """ctx.agents.run(target, brief, *, data=None, character=None, instruction=None, max_steps=None)
    → the sub-agent's raw output (a character agent: ``{segments, intent?}``).

    ``target``: ``{"contract": ...}`` or ``{"runtimeId": ...}`` (a bare string is a runtimeId). The
    run is delegate's (turns.engine.delegate.subagent_run): the sub-agent sees this run's staged
    writes, its own writes join them on success (committed with the caller, dropped with it), at
    most 8 run at once per execution (the 9th: ``unavailable`` at once) and ``maxSubagentCalls`` in
    all. Write services stay only when this run may stage writes (not background, not resumed).
    ``subagent.completed`` rows carry ``parentCallId`` ``agents-<n>``. Raises AgentRunFailed."""

    def __init__(self, env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, view: EngineStateView,
                 upstream: list[P.Proposal], own: StagedProposals, result: RuntimeResult) -> None:
        self._env, self._runtime, self._turn, self._view = env, runtime, turn, view
        self._upstream, self._own, self._result = upstream, own, result
        self._calls = 0

    def run(self, target: dict[str, Any] | str, brief: str, *, data: dict[str, Any] | None = None,
            character: str | None = None, instruction: str | None = None, max_steps: int | None = None) -> Any:
        from plugins_app.toolkit.errors import ToolError
        from turns.engine.agent import agent_runtime_run
        from turns.engine.delegate import request_check, subagent_run

        args: dict[str, Any] = {"target": {"runtimeId": target} if isinstance(target, str) else json_copy(target),
                                "brief": brief}
        for key, value in (("data", data), ("character", character), ("instruction", instruction), ("maxSteps", max_steps)):
            if value is not None:
                args[key] = json_copy(value)
        self._calls += 1
        can_stage = not self._runtime.is_background and self._turn.resumed_from_suspension_id is None
        try:
            request_check(args)
            outcome = subagent_run(self._env, self._runtime, self._turn, args, parent_call_id=f"agents-{self._calls}",
                                   staged=lambda: list(self._upstream) + self._own.items(), characters=self._view.characters,
                                   can_stage=can_stage, run=agent_runtime_run)
        except ToolError as exc:
            raise AgentRunFailed(exc.code, exc.message) from None
        self._own.extend(outcome.proposals)
        self._result.usage["input"] += outcome.usage.get("input", 0)
        self._result.usage["output"] += outcome.usage.get("output", 0)
        return json_copy(outcome.output)


@dataclass
class HostApis:
    """The host members one FunctionContext gets (built by ``host_apis``)."""

    plugin_data: PluginDataApi
    gateway: GatewayApi
    utils: UtilsApi
    media: MediaApi
    progress: ProgressApi
    recursive: RecursiveApi
    agents: AgentsApi
    extra: dict[str, Any] = field(default_factory=dict)


def host_apis(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, view: EngineStateView, own: StagedProposals,
              upstream: list[P.Proposal], emit: Callable[[str, dict], None], result: RuntimeResult, *, run: RunFunction,
              depth: int, progress_job_id: str | None = None) -> HostApis:
    """Build the host members of one function-runtime / guard execution. progress_job_id: the
    progress job a resumed run continues (from its suspension's continuation)."""
    utils = UtilsApi(env, runtime, emit)
    return HostApis(
        plugin_data=PluginDataApi(env, view, own, runtime.plugin_id, runtime.id),
        gateway=GatewayApi(env, runtime, emit, result),
        utils=utils,
        media=MediaApi(env, utils),
        progress=ProgressApi(runtime, emit, result.run_id, progress_job_id),
        recursive=RecursiveApi(env, runtime, turn, upstream, own, emit, result, run, depth),
        agents=AgentsApi(env, runtime, turn, view, upstream, own, result),
    )
