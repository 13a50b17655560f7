"""Configuration endpoints (spec 004 "Personal configuration API" and 配置信息): model slots,
presets, provider keys, deployment info, server settings and llm.toml as text. One ninja Router,
mounted at /api/ by covel.api; the logic lives in jobs.config_services."""
from __future__ import annotations

from ninja import Router

from jobs import config_services as services
from jobs import schemas
from sessions.api_scope import request_json
from covel.auth import require_operator
from covel.openapi import OPERATOR, OPERATOR_ERRORS, contract

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
