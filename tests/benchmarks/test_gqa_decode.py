"""Smoke test of benchmarks/gqa_decode.py: it runs, checks equality with SDPA(enable_gqa), reports ratios."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks.test_scripts import load


def test_gqa_decode_benchmark_reports_ratios_and_cache_bytes(tmp_path, capsys):
    out = tmp_path / "gqa.json"
    rows = load("gqa_decode").main([
        "--device", "cpu", "--lengths", "8", "16", "--kv-heads", "1", "4", "--batch", "2", "--d-model", "16",
        "--num-heads", "4", "--min-run-time", "0.005", "--json", str(out),
    ])
    assert [(r["cache_len"], r["kv_heads"]) for r in rows] == [(8, 1), (8, 4), (16, 1), (16, 4)]
    for r in rows:
        assert r["ratio"] == pytest.approx(r["torch_ms"] / r["ours_ms"]) and r["ratio"] > 0
        assert r["cache_bytes"] == 2 * 2 * r["kv_heads"] * (r["cache_len"] + 1) * 4 * 4
    assert "torch time / our time" in capsys.readouterr().out
    assert json.loads(out.read_text())["benchmark"] == "gqa_decode"
