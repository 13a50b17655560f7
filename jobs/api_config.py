"""Configuration endpoints (spec 004 "Personal configuration API" and 配置信息): model slots,
presets, provider keys, deployment info, server settings, llm.toml (and the desktop's config.toml)
as text, and the desktop-mode routes (keys, settings, proxy, app-update, data-root, open-folder). One ninja Router,
mounted at /api/ by covel.api; the logic lives in jobs.config_services."""
from __future__ import annotations

from ninja import Router

from jobs import config_services as services
from jobs import desktop_services, schemas
from sessions.api_scope import request_json
from covel.auth import require_operator
from covel.jsonbody import unknown_fields_check
from covel.openapi import OPERATOR, OPERATOR_ERRORS, contract, errors_merge

router = Router(tags=["config"])


@router.get("/llm-config")
@contract(ok=schemas.LlmConfigOut)
def get_llm_config(request):
    """Slots in effect with serverKeyConfigured, providers, source, envKeyOverrides, error?"""
    return services.llm_config_view(request)


@router.post("/llm-config/reload")
@contract(ok=schemas.LlmConfigReloadOut, security=OPERATOR, errors=OPERATOR_ERRORS)
def reload_llm_config(request):
    """Re-read llm.toml: 200 {ok, slots, error?}. Demo/commercial: 401 operator_token_required."""
    require_operator(request)
    return services.llm_config_reload(request)


@router.get("/presets")
@contract(ok=schemas.PresetsOut)
def list_presets(request):
    return services.presets_list(request)


@router.get("/provider-keys")
@contract(ok=schemas.ProviderKeysOut, security=OPERATOR, errors=OPERATOR_ERRORS)
def get_provider_keys(request):
    """{providers: {id: {configured: true}}}. Demo/commercial: 401 operator_token_required."""
    require_operator(request)
    return services.provider_keys_configured()


@router.get("/config/info")
@contract(ok=schemas.ConfigInfoOut)
def get_config_info(request):
    return services.config_info(request)


@router.get("/config/server-settings")
@contract(ok=schemas.ServerSettingsOut)
def get_server_settings(request):
    return services.server_settings_view()


@router.put("/config/server-settings")
@contract(ok=schemas.ServerSettingsOut, body=schemas.ServerSettingsIn, security=OPERATOR, errors={
    400: "invalid_server_settings_body / unknown_server_setting / invalid_server_setting_value",
    401: "desktop_rest_token_invalid", 403: "server_settings_operator_only", 409: "server_setting_fixed"})
def update_server_settings(request):
    """403 server_settings_operator_only, 401 desktop_rest_token_invalid, 400
    invalid_server_settings_body / unknown_server_setting / invalid_server_setting_value,
    409 server_setting_fixed."""
    return services.server_settings_update(request, request_json(request) if request.body.strip() else None)


@router.get("/config/raw")
@contract(ok=schemas.RawConfigFilesOut, security=OPERATOR, errors={401: "unauthorized: the desktop/operator token", 403: "not available in this deployment"})
def list_raw_config_files(request):
    services.raw_files_authorize(request)
    return services.raw_files_list()


@router.get("/config/raw/{name}")
@contract(ok=schemas.RawConfigFileContentOut, security=OPERATOR, errors={401: "unauthorized: the desktop/operator token", 403: "not available in this deployment", 404: "config_file_unknown"})
def get_raw_config_file(request, name: str):
    services.raw_files_authorize(request)
    return services.raw_file_get(name)


@router.put("/config/raw/{name}")
@contract(ok=schemas.RawConfigFileSavedOut, body=schemas.RawConfigFileIn, security=OPERATOR, errors={
    401: "unauthorized: the desktop/operator token", 403: "not available in this deployment", 400: "config_file_request_invalid / config_file_invalid", 404: "config_file_unknown",
    409: "config_file_changed", 413: "config_file_too_large"})
def put_raw_config_file(request, name: str):
    """404 config_file_unknown, 400 config_file_request_invalid / config_file_invalid, 413
    config_file_too_large, 409 config_file_changed."""
    services.raw_files_authorize(request)
    return services.raw_file_put(request, name, request_json(request) if request.body.strip() else None)


# --- desktop mode (COVEL_DESKTOP_REST=1; jobs.desktop_services) ---------------------------------

DESKTOP_ERRORS = {403: "desktop_rest_disabled: not in desktop mode (COVEL_DESKTOP_REST=1)",
                  401: "desktop_rest_token_invalid: COVEL_DESKTOP_REST_TOKEN set and not sent as Bearer"}


def _desktop_body(request, schema) -> dict:
    """A desktop write route's gate and body: desktop_authorize, then the JSON body without
    undeclared fields (400 invalid_request)."""
    desktop_services.desktop_authorize(request)
    body = request_json(request)
    unknown_fields_check(body, schema)
    return body


@router.get("/config/keys")
@contract(ok=schemas.ConfigKeysOut, security=OPERATOR, errors=DESKTOP_ERRORS)
def list_config_keys(request):
    """Desktop only: {items: [provider]} saved in keys.env, never a value."""
    desktop_services.desktop_authorize(request)
    return desktop_services.config_keys_list()


@router.put("/config/keys")
@contract(ok=schemas.ConfigKeysOut, body=schemas.ConfigKeysIn, security=OPERATOR,
          errors=errors_merge(DESKTOP_ERRORS, {400: "invalid_config_keys: not {provider: string|null}, a bad provider id or a line break"}))
def update_config_keys(request):
    """Desktop only: write <covelHome>/keys.env atomically; body {provider: key | null}."""
    desktop_services.desktop_authorize(request)
    return desktop_services.config_keys_update(request_json(request))


@router.get("/config/settings")
@contract(ok=schemas.DesktopSettingsOut, security=OPERATOR, errors=DESKTOP_ERRORS)
def get_desktop_settings(request):
    """Desktop only: {entries} of <covelHome>/settings.json."""
    desktop_services.desktop_authorize(request)
    return desktop_services.config_settings_get()


@router.put("/config/settings")
@contract(ok=schemas.DesktopSettingsOut, body=schemas.DesktopSettingsIn, security=OPERATOR,
          errors=errors_merge(DESKTOP_ERRORS, {400: "invalid_settings_body: not {entries: object}"}))
def update_desktop_settings(request):
    """Desktop only: merge {entries} (null removes a key) into settings.json, written atomically."""
    body = _desktop_body(request, schemas.DesktopSettingsIn)
    return desktop_services.config_settings_update(body)


@router.get("/config/proxy")
@contract(ok=schemas.ProxyOut, security=OPERATOR, errors=DESKTOP_ERRORS)
def get_proxy(request):
    """Desktop only: {mode, url?, effective, systemAvailable}."""
    desktop_services.desktop_authorize(request)
    return desktop_services.config_proxy_get()


@router.put("/config/proxy")
@contract(ok=schemas.ProxyOut, body=schemas.ProxyIn, security=OPERATOR,
          errors=errors_merge(DESKTOP_ERRORS, {400: "invalid_proxy_config: bad mode or url (the diagnosis in error)"}))
def update_proxy(request):
    """Desktop only: prepare the transport, write proxy.json atomically, apply it."""
    body = _desktop_body(request, schemas.ProxyIn)
    return desktop_services.config_proxy_update(body)


@router.get("/app-update/latest")
@contract(ok=schemas.AppUpdateOut, security=OPERATOR, errors=errors_merge(DESKTOP_ERRORS, {
    404: "app_update_not_found: no stable release", 502: "app_update_unreachable / app_update_upstream_error"}))
def get_latest_app_update(request):
    """Desktop only: the latest stable GitHub release {version, name, publishedAt}, through the proxy."""
    desktop_services.desktop_authorize(request)
    return desktop_services.app_update_latest()


@router.put("/config/data-root")
@contract(ok=schemas.DataRootOut, body=schemas.DataRootIn, security=OPERATOR,
          errors=errors_merge(DESKTOP_ERRORS, {400: "invalid_data_root"}))
def update_data_root(request):
    """Desktop only: rewrite config.toml's data_root line; applies after a restart."""
    body = _desktop_body(request, schemas.DataRootIn)
    return desktop_services.data_root_update(body)


@router.post("/config/open-folder")
@contract(ok=schemas.OpenFolderOut, body=schemas.OpenFolderIn, security=OPERATOR, errors={
    400: "open_target_unavailable: not desktop mode, no file manager, unknown or missing target",
    401: DESKTOP_ERRORS[401]})
def open_config_folder(request):
    """Desktop only: open config / data / logs, llm.toml (created when missing) or keys.env."""
    desktop_services.desktop_authorize(request, disabled_code=desktop_services.CODE_OPEN_UNAVAILABLE, disabled_status=400)
    body = request_json(request)
    unknown_fields_check(body, schemas.OpenFolderIn)
    return desktop_services.open_folder(body)
