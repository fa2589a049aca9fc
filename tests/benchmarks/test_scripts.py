"""Smoke tests for the scripts in benchmarks/: they run, check equality with torch, and report ratios."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str):
    """Import ``benchmarks/<name>.py`` (a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    # registered, as an imported module is: TorchDynamo looks up the module of a function it traces
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_quickly(name: str, tmp_path: Path, *options: str) -> tuple[list[dict], dict]:
    """``benchmarks/<name>.py`` on the CPU, 5 ms a measurement, with ``options``: its rows and the JSON it wrote."""
    out = tmp_path / f"{name}.json"
    rows = load(name).main(["--device", "cpu", *options, "--min-run-time", "0.005", "--json", str(out)])
    return rows, json.loads(out.read_text())


def assert_both_passes(rows: list[dict], length: str, lengths: list[int]) -> None:
    """One row for the forward pass, then one for forward and backward, at each of ``lengths`` in turn."""
    assert [(r[length], r["pass"]) for r in rows] == [(n, p) for n in lengths for p in ("forward", "fwd+bwd")]


def test_attention_benchmark_reports_ratios_for_each_length_and_pass(tmp_path, capsys):
    rows, record = run_quickly("attention", tmp_path, "--lengths", "8", "16", "--batch", "2", "--d-model", "16",
                               "--num-heads", "2")
    assert_both_passes(rows, "seq_len", [8, 16])
    for r in rows:
        assert r["ratio"] == pytest.approx(r["torch_ms"] / r["ours_ms"]) and r["ratio"] > 0
    printed = capsys.readouterr().out
    assert "ratio = ours-speed / torch-speed" in printed and "fwd+bwd" in printed
    assert record["benchmark"] == "attention" and record["rows"] == rows
    assert record["machine"]["cpu"] and record["machine"]["torch"]


def test_transformer_step_benchmark_reports_throughput_and_ratio(tmp_path, capsys):
    out = tmp_path / "step.json"
    module = load("transformer_step")
    result = module.main([
        "--device", "cpu", "--d-model", "16", "--num-heads", "2", "--encoder-layers", "1", "--decoder-layers", "1",
        "--d-ff", "32", "--batch", "2", "--src-len", "5", "--tgt-len", "4", "--vocab", "20",
        "--min-run-time", "0.005", "--warmup", "1", "--peak-tflops", "1", "--json", str(out),
    ])
    ours, theirs = result["models"]["ours"], result["models"]["torch"]
    assert result["ratio"] == pytest.approx(ours["tokens_per_s"] / theirs["tokens_per_s"])
    assert ours["mfu"] == pytest.approx(ours["tflops"] / 1.0)
    printed = capsys.readouterr().out
    assert "tokens/s" in printed and "MFU" in printed
    assert json.loads(out.read_text())["rows"][0]["n_params"] == result["n_params"]


def test_model_flops_follow_the_palm_count():
    module = load("transformer_step")
    from attncourse.nn import Transformer

    model = Transformer(30, 30, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=16,
                        max_len=16)
    n = sum(p.numel() for p in model.parameters()) - model.src_embedding.weight.numel()  # tied weight once
    # src_len = tgt_len = T: 6 N + 12 (L_enc + 2 L_dec) d_model T per target token.
    expected = 3 * 10 * (6 * n + 12 * (1 + 2 * 2) * 8 * 10)
    assert module.model_flops_per_step(model, batch=3, src_len=10, tgt_len=10) == expected


def test_local_attention_benchmark_checks_equality_and_reports_ratios(tmp_path, capsys):
    rows, record = run_quickly("local_attention", tmp_path, "--lengths", "8", "40", "--batch", "2", "--hidden", "8",
                               "--window", "2")
    assert_both_passes(rows, "src_len", [8, 40])
    for r in rows:
        assert r["global_ratio"] == pytest.approx(r["global_ms"] / r["windowed_ms"])
        assert r["masked_ratio"] == pytest.approx(r["masked_ms"] / r["windowed_ms"]) and r["masked_ratio"] > 0
    assert "time / windowed time" in capsys.readouterr().out
    assert record["benchmark"] == "local_attention"


def test_flash_attention_benchmark_checks_equality_and_reports_ratios_and_memory(tmp_path, capsys):
    rows, record = run_quickly("flash_attention", tmp_path, "--lengths", "16", "40", "--batch", "1", "--heads", "2",
                               "--d-k", "8", "--block", "16")
    assert_both_passes(rows, "n", [16, 40])
    for r in rows:
        assert r["tiled_ratio"] == pytest.approx(r["tiled_ms"] / r["sdpa_ms"]) and r["sdpa_ratio"] == 1.0
        assert r["textbook_peak_mib"] is None  # CPU: no CUDA allocator to ask
    # The tiled path keeps q, k, v, the output and one log-sum-exp per row: 4 n d + n numbers per head.
    assert rows[2]["tiled_saved_mib"] * 2**20 == 2 * (4 * 40 * 8 + 40) * 4
    assert rows[2]["textbook_saved_mib"] > rows[2]["tiled_saved_mib"]
    assert "time / SDPA time" in capsys.readouterr().out
    assert record["benchmark"] == "flash_attention"


def test_train_overhead_counts_syncs_and_graphs_apart_from_the_timing(tmp_path, capsys):
    """The loop reads nothing back per step; with compile, one graph per bucket, none later."""
    module = load("train_overhead")
    row = module.measure(epochs=3, n_train=100, batch_size=16, compile=True)
    # the last epoch's reads: 1 tolist (the batch order) and the epoch's totals, not per step
    assert row["syncs_by_call"] == {"tolist": 1, "__float__": 2, "__int__": 2}
    assert row["syncs_per_step"] == pytest.approx(5 / row["steps"])
    assert 1 <= row["graphs_first_epoch"] <= row["batch_shapes"] <= 4
    assert row["graphs_later_epochs"] == 0
    assert row["host_ms_per_step"] > 0 and row["wall_ms_per_step"] > 0
    with pytest.raises(ValueError, match="--epochs must be at least 3"):
        module.measure(epochs=2)


def test_max_pool_layout_checks_equality_then_reports_ratios(tmp_path, capsys):
    rows, record = run_quickly("max_pool_layout", tmp_path)
    module = load("max_pool_layout")
    assert [(r["shape"], r["pass"]) for r in rows] == [(name, p) for name, _ in module.SHAPES
                                                       for p in ("forward", "fwd+bwd")]
    for r in rows:
        assert r["ratio"] == pytest.approx(r["torch_ms"] / r["ours_ms"]) and r["ratio"] > 0
    assert "ratio torch / ours" in capsys.readouterr().out
    assert record["benchmark"] == "max_pool_layout" and record["rows"] == rows
