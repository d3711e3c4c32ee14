"""The one HF config mapping (backends/hf_common/config_names.py), checked against a
real transformers config and against Qwen2.5-3B's published config.json sizes."""

# Qwen2.5-3B's config.json (huggingface.co/Qwen/Qwen2.5-3B), as published.
QWEN25_3B_CONFIG = {
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_hidden_layers": 36,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
}
OURS = {
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_layers": 36,
    "num_heads": 16,
    "num_kv_heads": 2,
}


def test_a_published_config_json_reads_as_our_fields_and_back():
    from backends.hf_common.config_names import from_hf, to_hf

    assert from_hf(QWEN25_3B_CONFIG) == OURS
    assert to_hf(OURS) == QWEN25_3B_CONFIG


def test_the_config_transformers_builds_from_a_preset_holds_its_sizes_under_hf_names():
    from backends.hf_common.config_names import from_hf
    from backends.hf_common.model import architecture_of, hf_config
    from harness.scenario.presets import MODEL_PRESETS

    config = hf_config(MODEL_PRESETS["qwen2.5-3b"], "eager")
    assert {name: config.to_dict()[name] for name in QWEN25_3B_CONFIG} == QWEN25_3B_CONFIG
    assert from_hf(config) == OURS
    assert {k: v for k, v in architecture_of(config).items() if k in OURS} == OURS
