"""A new attention variant, defined in this file and nowhere else, trains through ``train-lm
--attention NAME`` and samples through ``sample``.

The variant changes only the scores: cosine-similarity attention with a fixed temperature,
softmax(tau cos(q_i, k_j)) (Henry et al. 2020, "Query-Key Normalization for Transformers",
whose tau is learned; fixed here). Everything else (checks, heads, RoPE, cache, masks) is
:class:`~attncourse.nn.causal_attention.CausalSelfAttention`'s plumbing. A fresh process sees it because
``ATTNCOURSE_VARIANTS`` names this module (:mod:`attncourse.nn.variants`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from attncourse.nn.attend import softmax_attend
from attncourse.nn.causal_attention import CausalSelfAttention, GQAOptions
from attncourse.nn.spec import register_attention


# ---- the variant: all of it ------------------------------------------------------------------
@dataclass(frozen=True)
class CosineOptions(GQAOptions):
    """The options of ``"gqa"`` and the temperature tau that scales the cosines."""

    temperature: float = 10.0


class CosineAttention(CausalSelfAttention):
    """softmax(tau cos(q_i, k_j)) v: the scores of unit-length queries and keys."""

    def attend(self, q, k, v, allowed, bias, **_):
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        return softmax_attend(q, k, v, allowed, bias, scale=self.options.temperature)


register_attention("toy-cosine", CosineOptions, CosineAttention.from_options)
# ---- end of the variant ----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
TEXT = "hello world. the attention is all you need. " * 40
SMALL = ["--steps", "4", "--steps-per-epoch", "2", "--context", "16", "--d-model", "16", "--num-heads", "2",
         "--num-layers", "1", "--d-ff", "32", "--batch-size", "4", "--no-progress"]


def _cli(*argv: str) -> subprocess.CompletedProcess:
    """``python -m attncourse ARGV`` in a fresh process that loads this module's variant."""
    # This module by the name pytest imported it under (tests.cli.test_lm_variants), from the root.
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "ATTNCOURSE_VARIANTS": __name__, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "attncourse", *argv], env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_toy_variant_trains_through_train_lm_and_samples(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    trained = _cli("train-lm", "--attention", "toy-cosine", "--num-kv-heads", "1", "--text", str(text),
                   "--out", str(out), *SMALL)
    assert trained.returncode == 0, trained.stderr
    assert json.loads((out / "config.json").read_text())["attention"] == "toy-cosine"
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    assert saved["model_config"]["spec"]["attention"] == {
        "name": "toy-cosine", "num_kv_heads": 1, "window": None, "bias": False, "temperature": 10.0}
    sampled = _cli("sample", str(out), "--prompt", "hello", "--length", "10", "--seed", "1")
    assert sampled.returncode == 0, sampled.stderr
    assert sampled.stdout.startswith("hello") and len(sampled.stdout) == len("hello") + 10 + 1


def test_without_its_module_a_fresh_process_refuses_the_name_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ATTNCOURSE_VARIANTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "attncourse", "train-lm", "--attention", "toy-cosine",
                           "--out", str(tmp_path / "run"), *SMALL], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "attention must be one of" in proc.stderr
    assert "got 'toy-cosine'" in proc.stderr
    assert "ATTNCOURSE_VARIANTS" in proc.stderr


def test_the_toy_variant_is_the_plain_one_where_the_cosine_is_the_dot_product():
    # With unit-length q and k and tau = 1 / sqrt(d_k) the cosine scores are the dot product's: same weights.
    torch.manual_seed(0)
    plain = CausalSelfAttention(16, 2, positional="rope")
    cosine = CosineAttention.from_options(CosineOptions(temperature=8 ** -0.5), d_model=16, num_heads=2,
                                          causal=True, positional="rope", rope_base=10000.0)
    cosine.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, 16)
    q, k = (F.normalize(t, dim=-1) for t in (torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)))
    v = torch.randn(2, 2, 5, 8)
    torch.testing.assert_close(cosine.attend(q, k, v, None, None)[0],
                               plain.attend(q, k, v, None, None, need_weights=True)[0])
    assert cosine(x)[0].shape == x.shape


def test_the_toy_variant_decodes_with_the_cache_as_without():
    # The plumbing's cache, RoPE and masks serve the toy as they serve "gqa" (the contract of
    # tests/nn/test_decoder_attention.py covers it too when that file runs after this one).
    from attncourse.nn.gpt import GPT
    from attncourse.nn.spec import AttentionSpec, DecoderSpec

    torch.manual_seed(0)
    model = GPT.from_spec(DecoderSpec(11, d_model=16, num_heads=2, num_layers=2,
                                      attention=AttentionSpec("toy-cosine", {"num_kv_heads": 1}))).double().eval()
    tokens = torch.randint(0, 11, (2, 9))
    caches = model.init_cache(2)
    steps = [model(tokens[:, :4], caches)[0]] + [model(tokens[:, t:t + 1], caches)[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), model(tokens)[0])
    assert model(tokens)[1] == [None, None] and model(tokens, need_weights=True)[1][0].shape == (2, 2, 9, 9)


def test_the_variants_own_option_reaches_train_lm(tmp_path):
    # CosineOptions.temperature is declared in this file only: its field is train-lm's --temperature.
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    trained = _cli("train-lm", "--attention", "toy-cosine", "--temperature", "3.5", "--text", str(text),
                   "--out", str(out), *SMALL)
    assert trained.returncode == 0, trained.stderr
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    assert saved["model_config"]["spec"]["attention"]["temperature"] == 3.5
    refused = _cli("train-lm", "--temperature", "3.5", "--text", str(text), "--out", str(tmp_path / "gqa"), *SMALL)
    assert refused.returncode == 2 and "attention 'gqa' has no option 'temperature'" in refused.stderr
    assert refused.stderr.count("\n") == 1 and not (tmp_path / "gqa").exists()
