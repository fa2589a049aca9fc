"""The gpu preset's schedule, scaled down to the CPU: validation exact match per optimizer step.

The GPU is lent rarely, so the gpu preset's learning-rate schedule is chosen here:
the preset's recipe (post-norm Transformer, label smoothing 0.1, AdamW(0.9, 0.98,
1e-9), the warm-up schedule of Vaswani et al. (2017), eq. (3), at ``lr_scale``)
at a smaller width, depth and batch, so that a run takes about a minute of one
CPU core (one thread). Each schedule is trained for the same number of steps; validation exact
match (greedy decoding) is read every ``--steps-per-epoch`` steps and plotted
against the step. The eq. (3) rate scales as d_model^-0.5, so a smaller width
runs at a higher rate: the comparison is between schedules at one width, and the
step at which each reaches 0.99 is what the gpu preset's step budget must cover.

Usage: ``python tools/gpu_schedule_study.py [--out results/gpu-schedule] [--steps 600]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

#: name -> overrides of transformer_preset("gpu"): the preset's schedule and the one proposed (lr_scale 0.316).
SCHEDULES: dict[str, dict] = {
    "warm-up 400, no clipping (gpu preset)": {"warmup": 400, "lr_scale": 0.316, "clip_norm": None},
    "warm-up 200, clip 1.0 (proposed)": {"warmup": 200, "lr_scale": 0.316, "clip_norm": 1.0},
}


def run(steps: int, steps_per_epoch: int, batch: int, d_model: int, layers: int, task: str) -> dict:
    """Train each schedule for ``steps`` steps; return {name: [(step, valid_exact_match, seconds)]}."""
    import torch

    from attncourse.recipes.experiment import run_experiment, transformer_preset

    torch.set_num_threads(1)  # small matrices: a second thread's synchronisation costs more than it saves
    curves: dict[str, list] = {}
    for name, schedule in SCHEDULES.items():
        exp = transformer_preset(
            "gpu", task=task, d_model=d_model, num_heads=4, num_layers=layers, d_ff=4 * d_model,
            batch_size=batch, n_train=batch * steps_per_epoch, n_valid=300, n_test=100,
            epochs=steps // steps_per_epoch, amp=None, fused=False, time_budget=None, length_buckets=None,
            **schedule)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            trained = run_experiment(exp, progress=False, out_dir=tmp, device="cpu")
        history = trained.result.history
        done, curve = 0, []
        for row in history:
            done += int(row["train_steps"])
            curve.append((done, float(row["valid_exact_match"])))
        curves[name] = {"curve": curve, "seconds": time.perf_counter() - start}
        first = next((s for s, em in curve if em >= 0.99), None)
        print(f"{name}: final exact match {curve[-1][1]:.3f}, >= 0.99 first at step {first}, "
              f"{curves[name]['seconds']:.0f} s", flush=True)
    return curves


def plot(curves: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, data in curves.items():
        steps, em = zip(*data["curve"])
        ax.plot(steps, em, marker="o", markersize=3, label=name)
    ax.axhline(0.99, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("validation exact match (greedy)")
    ax.set_ylim(0, 1.01)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/gpu-schedule"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--task", default="numbers-en-de")
    parser.add_argument("--plot-only", action="store_true", help="redraw the figure from OUT/curves.json")
    args = parser.parse_args(argv)
    if args.plot_only:
        saved = json.loads((args.out / "curves.json").read_text())
        args = argparse.Namespace(**{**saved["settings"], "out": args.out})
        curves = saved["curves"]
    else:
        curves = run(args.steps, args.steps_per_epoch, args.batch, args.d_model, args.layers, args.task)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "plot_only")}
    (args.out / "curves.json").write_text(json.dumps({"settings": settings, "curves": curves}, indent=1) + "\n")
    title = (f"gpu preset's recipe at d_model {args.d_model}, {args.layers}+{args.layers} layers, "
             f"batch {args.batch} pairs ({args.task}, CPU)")
    plot(curves, args.out / "exact_match_per_step.png", title)
    print(f"wrote {args.out}/curves.json and exact_match_per_step.png")


if __name__ == "__main__":
    main()
