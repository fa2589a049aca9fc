"""Tests for data-parallel training (attncourse.train.distributed and fit under DistributedDataParallel).

Two CPU processes joined by the gloo backend stand in for two GPUs.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attncourse.data.batching import build_vocabs, make_batches
from attncourse.data.pairs import PairDataset
from attncourse.nn.rnn import Seq2Seq
from attncourse.train.checkpoint import load_checkpoint
from attncourse.train.distributed import (
    DistInfo,
    broadcast_object,
    current,
    gather_objects,
    init_distributed,
    rank_batch_order,
    spawn_cpu_processes,
)
from attncourse.train.fit import FitConfig, fit
from attncourse.train.seq2seq import sequence_loss

# importlib: the package's function fit shadows the module attncourse.train.fit
fit_module = importlib.import_module("attncourse.train.fit")

#: Every rank trains with this; restore_best=False so that the final weights are the last update's.
CONFIG = FitConfig(epochs=2, lr=1e-2, batch_size=8, seed=0, device="cpu", num_threads=1, restore_best=False,
                   schedule="noam", warmup=3, d_model_for_schedule=8, label_smoothing=0.1)

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without torch.distributed")


def tiny_data():
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(40):
        src = tuple(str(c) for c in rng.choice(list("abcde"), size=int(rng.integers(2, 5))))
        pairs.append((src, src[::-1]))
    train = PairDataset(tuple(pairs[:32]), level="word", name="train")
    valid = PairDataset(tuple(pairs[32:]), level="word", name="valid")
    src_vocab, tgt_vocab = build_vocabs(train)
    return (make_batches(train, src_vocab, tgt_vocab, 8, shuffle=True, seed=0),
            make_batches(valid, src_vocab, tgt_vocab, 64, shuffle=False), len(src_vocab), len(tgt_vocab))


def train_worker(rank: int, world_size: int, out: str) -> None:
    """One rank: train a tiny RNN for 2 epochs under DDP, then save what it ends with."""
    torch.set_num_threads(1)
    info = current()
    assert (info.rank, info.world_size, info.backend) == (rank, world_size, "gloo")
    assert broadcast_object({"from": rank}) == {"from": 0}
    assert gather_objects(rank) == list(range(world_size))
    train_batches, valid_batches, n_src, n_tgt = tiny_data()
    torch.manual_seed(rank)  # different initial weights on each rank: DDP must broadcast rank 0's
    model = Seq2Seq(n_src, n_tgt, emb_dim=8, hidden_dim=8, dropout=0.1)
    result = fit(model, train_batches, valid_batches, CONFIG, out_dir=Path(out) / "run", progress=False,
                 callback=lambda history: (Path(out) / f"callback{rank}").touch())
    torch.save({"state": model.state_dict(), "history": result.history, "world_size": result.world_size,
                "train_tokens": result.train_tokens}, Path(out) / f"rank{rank}.pt")


def simulate_two_ranks(train_batches, n_src, n_tgt):
    """What DDP should compute, in one process: each step, the mean of the two ranks' batch losses.

    Each rank's dropout draws from its own generator, seeded with seed + rank, as in fit.
    """
    torch.manual_seed(0)
    model = Seq2Seq(n_src, n_tgt, emb_dim=8, hidden_dim=8, dropout=0.1)
    optimizer = fit_module.make_optimizer(model, CONFIG, "cpu")
    scheduler = fit_module.make_scheduler(optimizer, CONFIG, model)
    rng = []
    for rank in range(2):
        torch.manual_seed(CONFIG.seed + rank)
        rng.append(torch.get_rng_state())
    model.train()
    for epoch in range(1, CONFIG.epochs + 1):
        orders = [rank_batch_order(len(train_batches), epoch, CONFIG.seed, rank, 2) for rank in range(2)]
        for step in range(len(orders[0])):
            optimizer.zero_grad()
            losses = []
            for rank in range(2):
                torch.set_rng_state(rng[rank])
                b = train_batches[orders[rank][step]]
                logits = model(b.src, b.src_mask, b.tgt_in).logits
                losses.append(sequence_loss(logits, b.tgt_out, label_smoothing=CONFIG.label_smoothing)[0])
                rng[rank] = torch.get_rng_state()
            (sum(losses) / 2).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CONFIG.clip_norm)
            optimizer.step()
            scheduler.step()
    return model.state_dict()


def test_rank_batch_order_splits_every_epoch_evenly():
    n, world = 11, 3
    for epoch in (1, 2):
        parts = [rank_batch_order(n, epoch, seed=0, rank=r, world_size=world) for r in range(world)]
        assert all(len(p) == 4 for p in parts)  # ceil(11 / 3), equal on every rank
        flat = [i for p in parts for i in p]
        assert set(flat) == set(range(n)) and len(flat) == 12  # one batch repeated to even the ranks out
        assert parts == [rank_batch_order(n, epoch, seed=0, rank=r, world_size=world) for r in range(world)]
    assert rank_batch_order(n, 1, 0, 0, world) != rank_batch_order(n, 2, 0, 0, world)
    with pytest.raises(ValueError, match="rank"):
        rank_batch_order(n, 1, 0, 3, world)


def test_single_process_needs_no_group(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_distributed() == DistInfo() and current().world_size == 1 and current().is_main
    assert broadcast_object(5) == 5 and gather_objects(5) == [5]
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(ValueError, match="torchrun"):
        init_distributed()


def test_two_gloo_processes_end_with_identical_weights(tmp_path):
    spawn_cpu_processes(train_worker, 2, str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    a, b = ranks[0]["state"], ranks[1]["state"]
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    histories = [[{k: v for k, v in row.items() if k != "seconds"} for row in r["history"]] for r in ranks]
    assert histories[0] == histories[1] and len(histories[0]) == 2  # same scores, same early-stopping decisions
    assert ranks[0]["world_size"] == 2
    train_batches, _, n_src, n_tgt = tiny_data()
    # each epoch, the two ranks together see every batch (one may be repeated to even them out)
    assert ranks[0]["train_tokens"] >= 2 * sum(b.n_tgt_tokens for b in train_batches)
    # only rank 0 writes files and calls the callback
    assert sorted(os.listdir(tmp_path / "run")) == ["best.pt", "checkpoint.pt"]
    assert (tmp_path / "callback0").exists() and not (tmp_path / "callback1").exists()
    saved = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    steps = 2 * -(-len(train_batches) // 2)  # ceil(n / 2) updates per epoch, 2 epochs
    assert saved["scheduler_state"]["last_epoch"] == steps
    assert saved["trainer"]["fit_config"]["world_size"] == 2
    assert len(saved["trainer"]["rank_rng_states"]) == 2
    torch.manual_seed(0)
    untrained = Seq2Seq(n_src, n_tgt, emb_dim=8, hidden_dim=8, dropout=0.1).state_dict()
    assert any(not torch.equal(untrained[k], a[k]) for k in a)  # it trained
    # and it trained on the mean gradient of the two ranks' batches, from rank 0's initial weights
    expected = simulate_two_ranks(train_batches, n_src, n_tgt)
    # Not bit for bit: the all-reduce sums in another order, and Adam magnifies the rounding
    # of near-zero gradients (seen: 2e-4 in one element of u_a on a loaded machine). So:
    # every element close, and nearly all of them equal to 1e-5 (a wrong gradient, such as
    # one rank's instead of the mean, moves almost every element by more than that).
    for name in a:
        assert torch.allclose(a[name], expected[name], atol=1e-3), name
    diffs = torch.cat([(a[name] - expected[name]).abs().flatten() for name in a])
    assert (diffs > 1e-5).float().mean() < 0.01, (diffs > 1e-5).float().mean()


def write_tsv(path: Path, n: int, offset: int = 0) -> Path:
    words = ["one", "two", "three", "four", "five"]
    lines = []
    for i in range(n):
        src = [words[(i * 3 + j + offset) % len(words)] for j in range(1 + (i + offset) % 3)]
        lines.append(" ".join(src) + "\t" + " ".join(reversed(src)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_cli_under_torchrun_two_processes(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "attncourse", "train", "--train", str(write_tsv(tmp_path / "train.tsv", 32)),
           "--valid", str(write_tsv(tmp_path / "valid.tsv", 8, 1)), "--out", str(out), "--model", "rnn",
           "--emb-dim", "8", "--hidden-dim", "8", "--batch-size", "8", "--epochs", "2", "--device", "cpu",
           "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("attncourse: rnn model") == 1  # rank 0 prints, rank 1 does not
    assert "2 processes (gloo)" in proc.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["world_size"] == 2 and len(results["history"]) == 2
    assert results["tokens_per_second"] > 0
    assert json.loads((out / "config.json").read_text())["world_size"] == 2
