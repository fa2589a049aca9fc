"""The Triton sweep of benchmarks/flash_attention.py, run under the interpreter at tiny sizes.

On the CPU the sweep only tests the code (the interpreter is not for timing); the
measurements are made with ``--device cuda`` on a GPU.
"""

import json

import pytest

from attncourse.kernels import INTERPRETED, TRITON_AVAILABLE
from tests.benchmarks.test_scripts import load

pytestmark = pytest.mark.skipif(not (TRITON_AVAILABLE and INTERPRETED),
                                reason="needs triton under its interpreter (no GPU here)")

TINY = ["--device", "cpu", "--sweep", "only", "--sweep-lengths", "40", "--sweep-dims", "16",
        "--sweep-dtypes", "float32", "bfloat16", "--sweep-min-run-time", "0.005"]


def test_sweep_checks_the_paths_agree_and_reports_time_and_tflops(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    rows = load("flash_attention").main(TINY + ["--json", str(out)])
    assert [(r["table"], r["dtype"], r["d"], r["n"], r["pass"]) for r in rows] == [
        ("triton_sweep", "float32", 16, 40, "forward"), ("triton_sweep", "float32", 16, 40, "fwd+bwd")]
    forward, both = rows
    assert forward["flops"] == 4 * 40 * 40 * 16 / 2 and both["flops"] == 3.5 * forward["flops"]
    for row in rows:
        assert row["sdpa_backend"] == "flash"   # the CPU flash kernel takes float32
        assert row["triton_precision"] == "ieee"
        for path in ("triton", "sdpa", "textbook"):
            assert row[f"{path}_tflops"] == pytest.approx(row["flops"] / row[f"{path}_ms"] / 1e9)
            assert row[f"{path}_error"] is None
        assert row["sdpa_max_diff"] < 1e-5 and row["textbook_max_diff"] < 1e-5
        assert row["sdpa_over_triton"] == pytest.approx(row["sdpa_ms"] / row["triton_ms"])
    text = capsys.readouterr().out
    assert "bfloat16: skipped" in text and "MISMATCH" not in text
    assert json.loads(out.read_text())["rows"][0]["table"] == "triton_sweep"


def test_sweep_reports_a_mismatch_writes_the_json_and_fails(tmp_path, monkeypatch, capsys):
    module = load("flash_attention")
    monkeypatch.setitem(module.SWEEP_TOLERANCE, "float32", -1.0)   # any difference is too large
    out = tmp_path / "sweep.json"
    with pytest.raises(SystemExit, match="2 mismatches"):
        module.main(TINY[:-4] + ["float32", "--sweep-min-run-time", "0.005", "--json", str(out)])
    assert "MISMATCH: float32 d=16 n=40: sdpa differs from triton" in capsys.readouterr().out
    assert len(json.loads(out.read_text())["rows"]) == 2


def test_sdpa_backend_is_named_from_the_operator_that_ran():
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    module = load("flash_attention")
    q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
    assert module.sdpa_backend(q, k, v) == "flash"       # the CPU's fused kernel
    with sdpa_kernel([SDPBackend.MATH]):
        assert module.sdpa_backend(q, k, v) == "math"
