"""Named experiments: task loading, length filters, and train-once-then-load runs."""

import re

import pytest
import torch

from attncourse.nn.rnn import Seq2Seq
from attncourse.recipes.experiment import (
    Experiment,
    build_model,
    load_task,
    run_experiment,
    seconds_to_reach,
    shorter_than,
    transformer_preset,
)

TINY = Experiment(n_train=200, n_valid=40, n_test=40, epochs=2, emb_dim=8, hidden_dim=16)


def test_load_task_sizes_and_errors():
    splits = load_task("numbers-en-de", n_train=50, n_valid=10, n_test=20)
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (50, 10, 20)
    assert load_task("dates", n_train=5, n_valid=5, n_test=5).train.level == "char"
    with pytest.raises(ValueError, match="unknown task 'numbers-en-xx'"):
        load_task("numbers-en-xx")
    with pytest.raises(ValueError, match="numbers tasks only"):
        load_task("dates", max_value=10)


def test_shorter_than_keeps_exactly_the_short_pairs():
    data = load_task("numbers-en-fr", n_train=300, n_valid=10, n_test=10).train
    short = shorter_than(data, 5)
    assert all(len(src) <= 5 for src, _ in short.pairs)
    assert len(short) == sum(len(src) <= 5 for src, _ in data.pairs) > 0


def test_name_changes_with_every_field():
    assert TINY.name != Experiment(**{**TINY.__dict__, "seed": 1}).name
    assert TINY.name.startswith("numbers-en-fr/bahdanau-all-h16-")
    assert "rnn-upto5" in Experiment(attention=None, max_train_src_len=5).name


def test_second_run_loads_the_finished_run_without_training(tmp_path):
    torch.set_num_threads(1)
    first = run_experiment(TINY, progress=False, out_dir=tmp_path)
    again = run_experiment(TINY, progress=False, out_dir=tmp_path)
    assert again.result.history == first.result.history
    assert all(torch.equal(a, b) for a, b in zip(first.model.parameters(), again.model.parameters()))
    assert again.result.wall_time < first.result.wall_time


def test_seconds_to_reach():
    history = [{"seconds": 2.0, "valid_exact_match": 0.5}, {"seconds": 3.0, "valid_exact_match": 0.99}]
    assert seconds_to_reach(history, 0.98) == 5.0
    assert seconds_to_reach(history, 0.4) == 2.0
    assert seconds_to_reach(history, 0.999) is None


def test_every_field_at_any_value_enters_the_name():
    assert Experiment(dropout=0.1).name != Experiment().name
    assert Experiment(label_smoothing=0.1).name != Experiment().name
    assert Experiment(model="transformer", d_model=64).name != Experiment(model="transformer").name
    name = Experiment(task="numbers-en-fr", attention="bahdanau", hidden_dim=128).name
    assert re.fullmatch(r"numbers-en-fr/bahdanau-all-h128-[0-9a-f]{12}", name)


def test_transformer_presets():
    cpu = transformer_preset("cpu")
    assert (cpu.model, cpu.d_model, cpu.num_heads, cpu.num_layers, cpu.d_ff) == ("transformer", 128, 4, 2, 512)
    assert (cpu.dropout, cpu.label_smoothing, cpu.schedule, cpu.betas, cpu.eps) == (
        0.1, 0.1, "noam", (0.9, 0.98), 1e-9)
    gpu = transformer_preset("gpu", task="dates", epochs=3)
    # The paper's batch (~25,000 target tokens) but a run of minutes, not 100,000 steps: the
    # warm-up scaled down to 400 steps, its peak rate kept by lr_scale.
    assert (gpu.d_model, gpu.num_heads, gpu.num_layers, gpu.d_ff, gpu.warmup) == (512, 8, 6, 2048, 400)
    assert (gpu.amp, gpu.fused, gpu.optimizer, gpu.weight_decay, gpu.clip_norm) == ("bf16", True, "adamw", 0.0, None)
    assert gpu.epochs == 3 and gpu.task == "dates" and gpu.n_train + gpu.n_valid + gpu.n_test <= 36_525
    assert cpu.name.startswith("numbers-en-fr/transformer-all-d128-") and cpu.name != gpu.name
    config = gpu.fit_config(device="cpu")
    assert (config.schedule, config.warmup, config.label_smoothing, config.amp, config.betas) == (
        "noam", 400, 0.1, "bf16", (0.9, 0.98))
    assert abs(config.lr_scale - (400 / 4000) ** 0.5) < 1e-3
    with pytest.raises(ValueError, match="unknown preset 'tpu'"):
        transformer_preset("tpu")
    with pytest.raises(TypeError):
        transformer_preset("cpu", depth=3)
    with pytest.raises(ValueError, match="model must be one of"):
        Experiment(model="lstm")


def test_build_model_dispatches_on_the_model_field():
    rnn = build_model(Experiment(emb_dim=8, hidden_dim=16, dropout=0.2), 10, 12)
    assert isinstance(rnn, Seq2Seq) and rnn.config["dropout"] == 0.2 and rnn.config["tgt_vocab_size"] == 12
    pytest.importorskip("attncourse.nn.transformer")
    small = transformer_preset("cpu", d_model=16, num_heads=2, num_layers=1, d_ff=32)
    transformer = build_model(small, 10, 12)
    assert type(transformer).__name__ == "Transformer"
    assert {k: transformer.config[k] for k in ("d_model", "num_heads", "num_encoder_layers", "num_decoder_layers",
                                               "d_ff", "dropout")} == {
        "d_model": 16, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1, "d_ff": 32, "dropout": 0.1}


def test_transformer_experiment_trains_then_loads(tmp_path):
    pytest.importorskip("attncourse.nn.transformer")
    torch.set_num_threads(1)
    tiny = transformer_preset("cpu", n_train=200, n_valid=40, n_test=40, epochs=2, d_model=16, num_heads=2,
                              num_layers=1, d_ff=32, warmup=10)
    first = run_experiment(tiny, progress=False, out_dir=tmp_path)
    again = run_experiment(tiny, progress=False, out_dir=tmp_path)
    assert len(first.result.history) == 2 and again.result.history == first.result.history
    assert all(torch.equal(a, b) for a, b in zip(first.model.parameters(), again.model.parameters()))


def test_luong_experiments_build_the_luong_model():
    from attncourse.nn.luong import LuongSeq2Seq
    local = Experiment(model="luong", score="dot", mode="local-p", window=3, bidirectional=False,
                       emb_dim=8, hidden_dim=16)
    model = build_model(local, 10, 12)
    assert isinstance(model, LuongSeq2Seq)
    assert {k: model.config[k] for k in ("score", "mode", "window", "bidirectional", "hidden_dim")} == {
        "score": "dot", "mode": "local-p", "window": 3, "bidirectional": False, "hidden_dim": 16}
    assert build_model(Experiment(model="luong", score="location", hidden_dim=16), 10, 12).config["max_src_len"] > 0
    assert local.name.startswith("numbers-en-fr/luong-dot-local-p-all-h16-")
    assert local.name != Experiment(**{**local.__dict__, "window": 2}).name


def test_luong_experiment_trains_then_loads(tmp_path):
    torch.set_num_threads(1)
    tiny = Experiment(**{**TINY.__dict__, "model": "luong", "mode": "local-m", "window": 1})
    first = run_experiment(tiny, progress=False, out_dir=tmp_path)
    again = run_experiment(tiny, progress=False, out_dir=tmp_path)
    assert type(first.model).__name__ == "LuongSeq2Seq" and again.result.history == first.result.history
    assert all(torch.equal(a, b) for a, b in zip(first.model.parameters(), again.model.parameters()))


def test_fit_config_takes_every_setting_the_experiment_shares_with_it():
    # One mapping (fit_config_from): a FitConfig field that an Experiment also has reaches fit.
    import dataclasses

    from attncourse.train import FitConfig

    experiment = Experiment(epochs=3, lr=0.02, batch_size=16, patience=2, seed=5, clip_norm=None,
                            label_smoothing=0.1, schedule="noam", warmup=10, lr_scale=2.0, optimizer="adamw",
                            betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, amp="bf16", fused=True, compile=True,
                            length_buckets=4, time_budget=60.0)
    config = experiment.fit_config(device="cpu", num_threads=1)
    shared = {f.name for f in dataclasses.fields(FitConfig)} & {f.name for f in dataclasses.fields(Experiment)}
    assert len(shared) == 19
    for name in shared:
        assert getattr(config, name) == getattr(experiment, name), name
    assert config.device == "cpu" and config.num_threads == 1
    assert config.teacher_forcing == FitConfig().teacher_forcing  # not an Experiment field: the default
