"""attncourse/recipes/lm_config.py: one description of a language-model run, made once."""

import dataclasses

import pytest
import torch

from attncourse.cli.commands import main
from attncourse.nn import spec as spec_module
from attncourse.nn.spec import ATTENTION_VARIANTS, AttentionVariant, DecoderSpec
from attncourse.recipes.lm import LMConfig, LMSettings, lm_settings, lm_spec

SMALL = ["--steps", "2", "--steps-per-epoch", "1", "--context", "8", "--d-model", "16", "--num-heads", "2",
         "--num-layers", "2", "--d-ff", "16", "--batch-size", "2", "--no-progress", "--chunk-size", "4",
         "--positional", "none"]


def test_train_lm_makes_the_settings_the_spec_and_each_attention_once(tmp_path, monkeypatch, capsys):
    made = {"LMConfig": 0, "DecoderSpec": 0, "meta": 0, "real": 0}
    settings_init, spec_init = LMSettings.__post_init__, DecoderSpec.__post_init__

    def count_settings(self):
        made["LMConfig"] += 1
        settings_init(self)

    def count_spec(self):
        made["DecoderSpec"] += 1
        spec_init(self)

    variant = ATTENTION_VARIANTS["deltanet"]

    def build(*args, **kwargs):
        module = variant.build(*args, **kwargs)
        made["meta" if next(module.parameters()).is_meta else "real"] += 1
        return module

    monkeypatch.setattr(LMSettings, "__post_init__", count_settings)
    monkeypatch.setattr(DecoderSpec, "__post_init__", count_spec)
    monkeypatch.setitem(spec_module.ATTENTION_VARIANTS._table, "deltanet",
                        AttentionVariant("deltanet", variant.options, build))
    text = tmp_path / "text.txt"
    text.write_text("the attention is all you need. " * 30, encoding="utf-8")
    assert main(["train-lm", "--attention", "deltanet", "--text", str(text), "--out", str(tmp_path / "run"),
                 *SMALL]) == 0, capsys.readouterr().err
    # one model of 2 blocks: one LMConfig, one spec (checked once, on the meta device), 2 attentions
    assert made == {"LMConfig": 1, "DecoderSpec": 1, "meta": 1, "real": 2}


def test_every_variant_option_is_a_field_unset_by_default():
    fields = {f.name: f for f in dataclasses.fields(LMConfig)}
    for name in ("gqa", "gated", "mla", "linear", "deltanet", "gated-deltanet"):  # the package's
        for option in dataclasses.fields(ATTENTION_VARIANTS[name].options):
            if option.type in ("int", "int | None", "bool", "float", "str | None", "float | None"):
                assert fields[option.name].default is None, option.name
    assert fields["latent_dim"].metadata["limit"].high == 4096  # the variant's own range


def test_unset_options_do_not_name_the_run_and_multi_head_is_one_description():
    assert "num_kv_heads" not in lm_settings(LMConfig())
    assert LMConfig(num_kv_heads=8) == LMConfig() and LMConfig(attention="gqa") == LMConfig()
    assert LMConfig(attention="mla", latent_dim=8) == LMConfig(latent_dim=8)
    assert lm_settings(LMConfig(num_kv_heads=2))["num_kv_heads"] == 2


def test_the_spec_of_the_settings_is_the_keywords_spec():
    from attncourse.nn.gpt import GPT, keyword_spec

    for options in ({}, {"num_kv_heads": 2, "window": 8}, {"latent_dim": 16}, {"positional": "alibi"}):
        config = LMConfig(**options)
        # the same model; the keywords name g = h where the settings leave it unset
        keywords = keyword_spec(40, **options)
        assert lm_spec(config, 40).positions == keywords.positions
        assert lm_spec(config, 40).attention.name == keywords.attention.name
        torch.manual_seed(0)
        a = list(GPT(spec=lm_spec(config, 40)).parameters())
        torch.manual_seed(0)
        b = list(GPT(40, **options).parameters())
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_a_hybrid_needs_another_attention_and_whole_patterns():
    with pytest.raises(ValueError, match="needs another attention"):
        lm_spec(LMConfig(softmax_every=2), 40)
    with pytest.raises(ValueError, match="must divide num_layers=2"):
        lm_spec(LMConfig(attention="deltanet", softmax_every=3, positional="none"), 40)
    spec = lm_spec(LMConfig(attention="deltanet", softmax_every=2, num_layers=4, positional="none"), 40)
    assert [a.name for a in spec.attentions()] == ["deltanet", "gqa", "deltanet", "gqa"]
