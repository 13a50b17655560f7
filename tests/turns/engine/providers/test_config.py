import pytest

from turns.engine.providers.config import ModelConfig, ModelConfigError, model_config_load, model_config_parse, slot_for_runtime


def test_no_llm_toml_means_every_slot_is_scripted(tmp_path):
    config = model_config_load(tmp_path)
    assert config.slot("story").provider == "scripted" and config.slot("memory").provider == "scripted"


def test_resolution_request_model_then_override_then_manifest():
    config = model_config_parse("""
[covel.story]
provider = "openai"
model = "big"
baseUrl = "http://x/v1"
[covel.fast]
provider = "openai"
model = "small"
baseUrl = "http://x/v1"
[covel.plugin]
provider = "scripted"
""")
    assert slot_for_runtime(config=config, runtime_id="narrator", is_story=True)[0].name == "story"
    assert slot_for_runtime(config=config, runtime_id="codex", is_story=False)[0].name == "plugin"
    assert slot_for_runtime(config=config, runtime_id="codex", is_story=False, manifest_model="fast")[0].name == "fast"
    assert slot_for_runtime(config=config, runtime_id="codex", is_story=False, manifest_model="fast",
                            overrides={"codex": "story"})[0].name == "story"
    slot, model = slot_for_runtime(config=config, runtime_id="codex", is_story=False, request_model="fast", overrides={"codex": "story"})
    assert (slot.name, model) == ("fast", "small")


def test_rejects_malformed_provider_ids_and_fallback_cycles():
    with pytest.raises(ModelConfigError):
        model_config_parse('[covel.story]\nprovider = "No Pe!"\n')
    with pytest.raises(ModelConfigError):
        model_config_parse('[covel.a]\nfallback = "b"\n[covel.b]\nfallback = "a"\n')
    assert isinstance(model_config_parse(""), ModelConfig)


def test_unusable_base_url_or_deep_nesting_is_a_config_error():
    from turns.engine.providers.config import ModelConfigError, model_config_parse

    with pytest.raises(ModelConfigError, match="baseUrl"):
        model_config_parse('[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "http://[::1"\n')
    with pytest.raises(ModelConfigError, match="nested too deeply"):
        model_config_parse("x = " + "[" * 5000 + "]" * 5000 + "\n")


# --- free provider ids (issue: any name other than openai/scripted made the whole file invalid) ---


def test_free_provider_ids_parse_and_name_their_key(monkeypatch):
    from covel.outbound import provider_env_key_name
    from turns.engine.providers.config import ModelRouter, model_config_parse

    config = model_config_parse(
        '[covel.story]\nprovider = "deepseek"\nmodel = "deepseek-chat"\nbaseUrl = "https://api.deepseek.com/v1"\n\n'
        '[covel.plugin]\nprovider = "my-lab"\nmodel = "m"\nbaseUrl = "http://127.0.0.1:11434/v1"\n')
    assert (config.slot("story").provider, config.slot("plugin").provider) == ("deepseek", "my-lab")
    assert provider_env_key_name("my-lab") == "MY_LAB_API_KEY"
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-deep")
    key = ModelRouter(config).key_for(config.slot("story"))
    assert key is not None and key.value == "sk-deep" and key.source == "server"
    assert ModelRouter(config).key_for(config.slot("plugin")) is None  # no MY_LAB_API_KEY set


@pytest.mark.parametrize("toml,code", [
    ('[covel.story]\nprovider = "deepseek"\nmodel = "x"\n', "not_configured"),  # no endpoint known
    ('[covel.story]\nprovider = "openai"\nmodel = "x"\nbaseUrl = "http://127.0.0.1:9/v1"\n'
     'protocol = "anthropic-messages-v1"\n', "protocol_unsupported"),
])
def test_a_slot_that_cannot_be_called_fails_loudly_not_as_scripted(toml, code):
    from turns.engine.providers.base import ModelError, ModelRequest
    from turns.engine.providers.config import ModelRouter, model_config_parse

    config = model_config_parse(toml)  # the file itself is valid
    router = ModelRouter(config)
    with pytest.raises(ModelError) as failed:
        list(router.stream(config.slot("story"), "x", ModelRequest(messages=[{"role": "user", "content": "hi"}])))
    assert failed.value.code == code


def test_malformed_provider_ids_are_a_configuration_error():
    from turns.engine.providers.config import ModelConfigError, model_config_parse

    with pytest.raises(ModelConfigError):
        model_config_parse('[covel.story]\nprovider = "Deep Seek!"\nmodel = "x"\n')


def test_slot_chain_has_scripted_follows_fallbacks():
    from turns.engine.providers.config import slot_chain_has_scripted

    config = model_config_parse(
        '[covel.story]\nprovider = "openai"\nmodel = "m"\nfallback = "plugin"\n'
        '[covel.plugin]\nprovider = "scripted"\n'
        '[covel.fast]\nprovider = "openai"\nmodel = "m"\n')
    assert slot_chain_has_scripted(config, config.slot("story")) is True
    assert slot_chain_has_scripted(config, config.slot("plugin")) is True
    assert slot_chain_has_scripted(config, config.slot("fast")) is False
