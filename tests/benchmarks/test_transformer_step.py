"""The training step of benchmarks/transformer_step.py, written as the fast repositories write it:
padded vocabulary, no read-back in the step, SDPA's backend named, batch probe, compile that fails softly."""

from __future__ import annotations

import os

import pytest
import torch

from attncourse.nn import Transformer
from tests.benchmarks.test_scripts import load

step_bench = load("transformer_step")


def test_padded_vocabulary_rounds_up_to_the_multiple():
    assert [step_bench.padded_vocab(v, 64) for v in (1, 50, 64, 65, 32000)] == [64, 64, 64, 128, 32000]
    assert step_bench.padded_vocab(37, 1) == 37
    with pytest.raises(ValueError):
        step_bench.padded_vocab(10, 0)


def test_padding_the_vocabulary_leaves_the_loss_and_the_real_rows_gradients_unchanged():
    torch.manual_seed(0)
    vocab, padded = 50, step_bench.padded_vocab(50, 64)
    arch = dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, dropout=0.0,
                max_len=16)
    plain, wide = Transformer(vocab, vocab, **arch), Transformer(padded, padded, **arch)
    with torch.no_grad():
        for name, p in wide.named_parameters():
            q = dict(plain.named_parameters())[name]
            p[tuple(slice(0, n) for n in q.shape)].copy_(q)  # the first `vocab` rows; the padded ones random
    src = torch.randint(4, vocab, (3, 7))
    tgt = torch.randint(4, vocab, (3, 6))
    mask = torch.ones_like(src, dtype=torch.bool)
    losses = []
    for model in (plain, wide):
        logits = model(src, mask, tgt[:, :-1]).logits
        assert logits.shape[-1] == model.tgt_embedding.weight.shape[0]
        loss = step_bench.step_loss(logits, tgt[:, 1:], vocab)
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(wide.tgt_embedding.weight.grad[:vocab], plain.tgt_embedding.weight.grad,
                               rtol=1e-5, atol=1e-7)
    # the reference: PyTorch's own label-smoothed cross-entropy on the unpadded model
    reference = torch.nn.functional.cross_entropy(plain(src, mask, tgt[:, :-1]).logits.flatten(0, 1),
                                                  tgt[:, 1:].flatten(), label_smoothing=0.1, ignore_index=0)
    torch.testing.assert_close(losses[0].detach(), reference.detach())


def test_the_step_reads_nothing_back_and_the_losses_are_read_once(monkeypatch):
    torch.manual_seed(0)
    model = Transformer(30, 30, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16,
                        max_len=8, dropout=0.0)
    src, tgt = torch.randint(4, 30, (2, 5)), torch.randint(4, 30, (2, 5))
    mask = torch.ones_like(src, dtype=torch.bool)
    step, mean_loss = step_bench.make_step(model, lambda: model(src, mask, tgt[:, :-1]).logits, tgt[:, 1:], 30,
                                           torch.device("cpu"), None)
    losses = []
    with torch.no_grad():
        losses.append(step_bench.step_loss(model(src, mask, tgt[:, :-1]).logits, tgt[:, 1:], 30).item())

    def no_read(*args, **kwargs):
        raise AssertionError("the step read a value back from the device")

    with monkeypatch.context() as patch:
        for name in ("item", "__float__", "__bool__", "tolist"):
            patch.setattr(torch.Tensor, name, no_read)
        step()
    assert mean_loss() == pytest.approx(losses[0], rel=1e-5)
    assert isinstance(mean_loss(), float)


def test_nanogpt_is_causal_and_its_flops_follow_the_palm_count():
    torch.manual_seed(0)
    gpt = step_bench.NanoGPT(40, 16, 2, 2, 64, 0.0, 12).eval()
    idx = torch.randint(0, 40, (2, 10))
    changed = idx.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 40
    with torch.no_grad():
        a, b = gpt(idx), gpt(changed)
    assert a.shape == (2, 10, 40)
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])
    n = sum(p.numel() for p in gpt.parameters()) - gpt.wpe.weight.numel()  # tied output counted once
    assert step_bench.nanogpt_flops_per_step(gpt, 3, 10) == 3 * 10 * (6 * n + 12 * 2 * 16 * 10)
    assert step_bench.nanogpt_flops_per_step(gpt, 3, 10, vocab_padding=4) == 3 * 10 * (6 * (n - 64)
                                                                                          + 12 * 2 * 16 * 10)


def test_sdpa_backends_are_named_from_the_profiler():
    q = torch.randn(1, 2, 8, 4)
    named = step_bench.sdpa_backends(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert sum(named.values()) == 1 and set(named) <= set(step_bench.SDPA_OPS.values())
    assert step_bench.sdpa_backends(lambda: q @ q.transpose(-1, -2)) == {}


def test_largest_batch_doubles_until_a_step_no_longer_fits():
    tried = []

    def fits(batch):
        tried.append(batch)
        return batch <= 300

    assert step_bench.largest_batch(fits, 50, 10_000) == 200 and tried == [50, 100, 200, 400]
    assert step_bench.largest_batch(lambda b: True, 50, 150) == 100  # never beyond the limit
    assert step_bench.largest_batch(lambda b: False, 50, 1000) == 50


def test_a_compile_that_fails_is_one_line_and_the_eager_rows_are_still_timed(monkeypatch, capsys):
    def broken(module, **kwargs):
        assert kwargs == {"dynamic": False}

        def call(*args, **kw):
            raise RuntimeError("no C compiler\nsecond line")
        return call

    monkeypatch.setattr(step_bench.torch, "compile", broken)
    cfg = dict(d_model=8, num_heads=2, encoder_layers=1, decoder_layers=1, d_ff=16, batch=2, src_len=4, tgt_len=4,
               vocab=20)
    result = step_bench.run(torch.device("cpu"), cfg, 0.1, None, 0.005, 1, 1.0,
                            models=("ours", "nanogpt", "ours+compile"))
    assert result["failed"] == {"ours+compile": "RuntimeError: no C compiler"}
    assert set(result["models"]) == {"ours", "nanogpt"} and result["vocab_padded"] == 64
    assert result["ratios"]["ours_vs_nanogpt"] == pytest.approx(result["models"]["ours"]["tflops"]
                                                                 / result["models"]["nanogpt"]["tflops"])
    out = capsys.readouterr().out
    assert "ours+compile: failed in its first steps (RuntimeError: no C compiler); carrying on" in out
    assert "SDPA backends that ran" in out


def test_the_compile_cache_goes_where_it_is_told(tmp_path, monkeypatch):
    import torch._inductor.config as inductor_config

    for name in ("TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_CACHE"):
        monkeypatch.delenv(name, raising=False)
    # torch's config.patch, not monkeypatch: monkeypatch's undo deletes the attribute, and a
    # deleted inductor option is hidden for good, so every later compile in the worker failed.
    before = inductor_config.fx_graph_cache
    with inductor_config.patch(fx_graph_cache=False):
        step_bench.use_compile_cache(tmp_path / "cache")
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str((tmp_path / "cache").resolve())
        assert inductor_config.fx_graph_cache is True and (tmp_path / "cache").is_dir()
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        assert cache_dir() == str((tmp_path / "cache").resolve())
    assert inductor_config.fx_graph_cache is before
