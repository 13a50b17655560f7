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


def test_rejects_unknown_provider_and_fallback_cycles():
    with pytest.raises(ModelConfigError):
        model_config_parse('[covel.story]\nprovider = "nope"\n')
    with pytest.raises(ModelConfigError):
        model_config_parse('[covel.a]\nfallback = "b"\n[covel.b]\nfallback = "a"\n')
    assert isinstance(model_config_parse(""), ModelConfig)


def test_unusable_base_url_or_deep_nesting_is_a_config_error():
    from turns.engine.providers.config import ModelConfigError, model_config_parse

    with pytest.raises(ModelConfigError, match="baseUrl"):
        model_config_parse('[covel.story]\nprovider = "openai"\nmodel = "m"\nbaseUrl = "http://[::1"\n')
    with pytest.raises(ModelConfigError, match="nested too deeply"):
        model_config_parse("x = " + "[" * 5000 + "]" * 5000 + "\n")
