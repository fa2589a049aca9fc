"""Checkpoints written before the engine was split into attncourse/train/ (commit 370b458) load, and their runs resume.

The files in tests/fixtures/legacy/ were written by that commit's code
(tests/fixtures/write_legacy_checkpoints.py says how): a ``fit`` run of an RNN
encoder-decoder (``checkpoint.pt`` and ``best.pt``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from attncourse.data.batching import make_batches
from attncourse.data.pairs import PairDataset
from attncourse.data.vocab import Vocabulary
from attncourse.decode import greedy_decode
from attncourse.nn.rnn import Seq2Seq
from attncourse.train import FitConfig, fit, load_checkpoint, load_model

LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy"
RUNS = json.loads((LEGACY / "runs.json").read_text())


def dataset(name: str) -> PairDataset:
    return PairDataset(tuple((tuple(s), tuple(t)) for s, t in RUNS[name]), level="word", name=name)


def without_timings(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("seconds", "train_seconds")}


def test_best_weights_load_and_decode_as_they_did():
    model, checkpoint = load_model(LEGACY / "seq2seq" / "best.pt")
    assert isinstance(model, Seq2Seq)
    src_vocab = Vocabulary.from_dict(checkpoint["extra"]["src_vocab"])
    tgt_vocab = Vocabulary.from_dict(checkpoint["extra"]["tgt_vocab"])
    batch = make_batches(dataset("valid"), src_vocab, tgt_vocab, 8, shuffle=False)[0]
    hyps, _ = greedy_decode(model, batch.src, batch.src_mask, max_len=8)
    assert hyps == RUNS["greedy_of_best"]


def test_a_fit_run_resumes_from_its_old_checkpoint(tmp_path):
    out = tmp_path / "seq2seq"
    shutil.copytree(LEGACY / "seq2seq", out)
    saved = load_checkpoint(out / "checkpoint.pt")
    extra = saved["extra"]
    src_vocab, tgt_vocab = Vocabulary.from_dict(extra["src_vocab"]), Vocabulary.from_dict(extra["tgt_vocab"])
    model = Seq2Seq(len(src_vocab), len(tgt_vocab), emb_dim=8, hidden_dim=8, attention="bahdanau")
    config = FitConfig(**{**RUNS["seq2seq_config"], "epochs": 3})
    result = fit(model, make_batches(dataset("train"), src_vocab, tgt_vocab, 8, shuffle=True, seed=0),
                 make_batches(dataset("valid"), src_vocab, tgt_vocab, 8, shuffle=False), config,
                 out_dir=out, resume=True, progress=False, extra=extra)
    assert [row["epoch"] for row in result.history] == [1, 2, 3]
    assert [without_timings(r) for r in result.history[:2]] == [without_timings(r) for r in saved["history"]]
    assert load_checkpoint(out / "checkpoint.pt")["epoch"] == 3


