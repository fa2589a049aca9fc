"""Tests that need a CUDA GPU (marker ``cuda``): they skip on a machine without one.

``python -m attncourse gpu-report`` runs them on the GPU machine by file, so this
module imports only what that machine has: torch, pytest and attncourse (no
hypothesis, no notebook packages). Each compares the GPU path with a reference:
the float32 forward, the unfused optimizer, the eager model, the cache-free
forward, or the same run on the CPU.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from attncourse.data.batching import build_vocabs, make_batches, pad_to_buckets
from attncourse.nn.gpt import GPT
from attncourse.recipes.experiment import build_model, load_task, transformer_preset
from attncourse.train.config import FitConfig
from attncourse.train.fit import fit, make_optimizer
from attncourse.train.loop import Epoch
from attncourse.train.seq2seq import seq2seq_epoch

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CUDA = torch.device("cuda")


def _tiny(n_train: int = 400, batch_size: int = 32):
    experiment = transformer_preset("gpu", task="numbers-en-de", d_model=32, num_heads=2, num_layers=1, d_ff=64,
                                    n_train=n_train, n_valid=32, batch_size=batch_size, epochs=1)
    splits = load_task(experiment.task, n_train=n_train, n_valid=32, n_test=0)
    src_vocab, tgt_vocab = build_vocabs(splits.train)
    torch.manual_seed(0)
    model = build_model(experiment, src_vocab, tgt_vocab)
    train = make_batches(splits.train, src_vocab, tgt_vocab, batch_size, shuffle=True)
    valid = make_batches(splits.valid, src_vocab, tgt_vocab, 32, shuffle=False)
    return experiment, model, train, valid


def test_bf16_autocast_forward_is_close_to_float32():
    _, model, train, _ = _tiny()
    model = model.to(CUDA).eval()
    batch = train[0].to(CUDA)
    with torch.no_grad():
        reference = model(batch.src, batch.src_mask, batch.tgt_in).logits
        with torch.autocast("cuda", dtype=torch.bfloat16):
            low = model(batch.src, batch.src_mask, batch.tgt_in).logits
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), reference, atol=0.1, rtol=0.05)


def test_fused_adamw_takes_the_same_step_as_the_plain_one():
    _, model, train, _ = _tiny()
    model = model.to(CUDA)
    twin = build_model(transformer_preset("gpu", d_model=32, num_heads=2, num_layers=1, d_ff=64),
                       model.config["src_vocab_size"], model.config["tgt_vocab_size"]).to(CUDA)
    twin.load_state_dict(model.state_dict())
    model.eval(), twin.eval()  # no dropout: both see the same function
    config = FitConfig(optimizer="adamw", lr=1e-3, fused=True)
    fused = make_optimizer(model, config, CUDA)
    plain = make_optimizer(twin, FitConfig(optimizer="adamw", lr=1e-3, fused=False), CUDA)
    assert fused.defaults["fused"] is True
    batch = train[0].to(CUDA)
    for net, optimizer in ((model, fused), (twin, plain)):
        loss = net(batch.src, batch.src_mask, batch.tgt_in).logits.float().square().mean()
        loss.backward()
        optimizer.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_compile_matches_eager_and_compiles_one_graph_per_bucket():
    _, model, train, _ = _tiny()
    model = model.to(CUDA).eval()
    batches = [b.to(CUDA) for b in pad_to_buckets(train, 3, 32)]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(model, dynamic=False)
    with torch.no_grad():
        for batch in batches:
            torch.testing.assert_close(compiled(batch.src, batch.src_mask, batch.tgt_in).logits,
                                       model(batch.src, batch.src_mask, batch.tgt_in).logits,
                                       atol=1e-4, rtol=1e-4)
    shapes = {(tuple(b.src.shape), tuple(b.tgt.shape)) for b in batches}
    assert len(shapes) <= 3
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= len(shapes)


def test_training_step_does_not_wait_for_the_gpu():
    """torch's sync debug mode flags every host-device sync: none inside the steps, a few at the epoch's end."""
    _, model, train, _ = _tiny(n_train=800)
    model = model.to(CUDA).train()
    config = FitConfig(optimizer="adamw", fused=True, lr=1e-3, clip_norm=None)
    optimizer = make_optimizer(model, config, CUDA)
    train_epoch = seq2seq_epoch(train, torch.Generator().manual_seed(0))
    epoch = Epoch(1, model, model, optimizer, {}, CUDA)
    train_epoch(epoch)  # the first epoch moves the batches to the GPU
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train_epoch(Epoch(2, model, model, optimizer, {}, CUDA))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(syncs) <= 3, [str(w.message) for w in syncs[:5]]  # the epoch's sums, read once
    assert len(train) > 10


def test_fit_on_cuda_with_bf16_and_a_time_budget(tmp_path):
    experiment, model, train, valid = _tiny()
    # 5 s: the report's CUDA tests have 60 s in all
    config = dataclasses.replace(experiment.fit_config(device="cuda"), time_budget=5.0, epochs=50)
    result = fit(model, train, valid, config, out_dir=tmp_path, progress=False)
    assert result.device == "cuda"
    assert (tmp_path / "checkpoint.pt").is_file()
    assert result.history[-1]["valid_loss"] < result.history[0]["valid_loss"] or len(result.history) == 1


def test_one_process_nccl_group(tmp_path):
    import torch.distributed as dist

    from attncourse.train import distributed as dist_utils

    if not dist.is_nccl_available():
        pytest.skip("this torch has no NCCL")
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                            device_id=CUDA if "device_id" in dist.init_process_group.__code__.co_varnames else None)
    try:
        assert dist_utils.all_reduce_sums([1.0, 2.0], CUDA) == [1.0, 2.0]
        tensor = torch.ones(3, device=CUDA)
        dist.all_reduce(tensor)
        assert tensor.tolist() == [1.0, 1.0, 1.0]
    finally:
        dist.destroy_process_group()


def test_gpt_kv_cache_on_cuda_equals_the_full_forward():
    torch.manual_seed(0)
    model = GPT(50, d_model=32, num_heads=4, num_layers=2, max_len=64).to(CUDA).eval()
    tokens = torch.randint(0, 50, (2, 12), device=CUDA)
    with torch.no_grad():
        full, _ = model(tokens)
        caches = model.init_cache(2)
        steps = [model(tokens[:, i : i + 1], kv_caches=caches)[0] for i in range(tokens.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4)
    assert caches[0].k.device.type == "cuda"
