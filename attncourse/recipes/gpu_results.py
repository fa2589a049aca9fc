"""The committed GPU run (``results/transformer-gpu``, ``make gpu``) for the book.

Chapter 6 and the benchmarks appendix read it; without it they print the hint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Where the GPU run is committed, relative to the repository root.
GPU_RESULTS_DIR = Path("results") / "transformer-gpu"
#: What the book prints while there is no GPU run.
GPU_RESULTS_HINT = ("No GPU run is committed yet: on a CUDA machine, `make gpu` (python -m attncourse gpu-report "
                    "results/transformer-gpu) writes it in one command of at most 9 minutes; commit that folder.")


def load_gpu_results(root: str | Path | None = None) -> dict[str, Any] | None:
    """``results.json`` of the committed GPU run, or None if absent or unreadable.

    ``root``: the repository root; default: the checkout attncourse is imported from.
    """
    if root is None:
        import attncourse

        root = Path(attncourse.__file__).resolve().parent.parent
    path = Path(root) / GPU_RESULTS_DIR / "results.json"
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return results if isinstance(results, dict) and not results.get("smoke") else None


def _measured_with(results: dict[str, Any]) -> dict[str, Any]:
    machine = results.get("machine") or {}
    return {"device": machine.get("gpu_name") or machine.get("device"), "date": str(results.get("started", ""))[:10],
            "torch": machine.get("torch_version")}


def gpu_row(results: dict[str, Any]) -> dict[str, Any]:
    """One row of the comparison table for the GPU run: where, when, how fast, how well."""
    training = results.get("training") or {}
    summary = results.get("summary") or {}
    return {"preset": "gpu", **_measured_with(results),
            "parameters": training.get("n_parameters"),
            "train_seconds": training.get("train_seconds"),
            "tokens_per_second": training.get("tokens_per_second"),
            "test_exact_match": summary.get("test_exact_match_greedy"),
            "test_bleu": summary.get("test_bleu_greedy")}


def comparison_markdown(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of :func:`gpu_row`-shaped rows."""
    columns = [("preset", "preset", "{}"), ("device", "device", "{}"), ("date", "date", "{}"),
               ("torch", "torch", "{}"), ("parameters", "parameters", "{:,}"),
               ("train_seconds", "training (s)", "{:.0f}"), ("tokens_per_second", "target tokens/s", "{:,.0f}"),
               ("test_exact_match", "test exact match (greedy)", "{:.4f}"), ("test_bleu", "test BLEU", "{:.2f}")]
    lines = ["| " + " | ".join(title for _, title, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = ["-" if row.get(key) is None else spec.format(row[key]) for key, _, spec in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def benchmark_markdown(results: dict[str, Any]) -> str:
    """The GPU run's benchmarks as Markdown: each script's rows, with device, date and torch version."""
    measured = _measured_with(results)
    lines = [f"Measured on {measured['device']}, {measured['date']}, torch {measured['torch']}.", ""]
    for name, record in (results.get("benchmarks") or {}).items():
        rows = (record or {}).get("rows")
        if not rows:
            lines += ["", f"- `{name}`: no result ({(record or {}).get('error', 'not run')})"]
            continue
        flat = [_flatten(row) for row in rows]
        keys = [k for k, v in flat[0].items() if isinstance(v, (int, float, str)) or v is None][:14]
        lines += ["", f"**{name}**", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        for row in flat:
            lines.append("| " + " | ".join(_cell(row.get(k)) for k in keys) + " |")
    return "\n".join(lines)


#: Nested fields a table leaves out: the model's shape repeats the benchmark's settings, and
#: a model's milliseconds and TFLOP/s say what its tokens/s and MFU say.
_SKIPPED = ("config", "step_ms", "tflops")


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """One level per dot: ``{"a": {"b": x}}`` -> ``{"a.b": x}``, minus ``_SKIPPED``."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            if key not in _SKIPPED:
                flat.update(_flatten(value, f"{prefix}{key}."))
        elif not (prefix and key in _SKIPPED):
            flat[f"{prefix}{key}"] = value
    return flat


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


__all__ = ["GPU_RESULTS_DIR", "GPU_RESULTS_HINT", "benchmark_markdown", "comparison_markdown", "gpu_row",
           "load_gpu_results"]
