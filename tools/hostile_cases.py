"""The cases of tools/hostile_cli.py: what each invocation is, what it prepares in its folder
before the run (forged checkpoints and run files, special files, planted user files), and
where it may write. Split from the runner (tools/hostile_cli.py) by job.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = "hello world. the attention is all you need. " * 40 + "\n"
LM_TINY = ["--steps", "20", "--steps-per-epoch", "20", "--context", "16", "--d-model", "16", "--num-heads", "2",
           "--num-layers", "1", "--d-ff", "32", "--no-progress"]
SEQ_TINY = ["--epochs", "1", "--emb-dim", "8", "--hidden-dim", "16", "--batch-size", "16", "--lr", "0.01",
            "--no-progress"]
USER_FILE = "user/notes.txt"  # planted in every case: no invocation may touch it


# --- cases ------------------------------------------------------------------------------------------


@dataclass
class Case:
    category: str
    name: str
    argv: list[str]
    needs: tuple[str, ...] = ()  # base runs copied into the case folder: "lm", "gated", "delta", "seq"
    prepare: Callable[[Path], None] | None = None  # called in the case folder before the run
    allowed: list[str] = field(default_factory=list)  # where it may write (relative)
    planted: list[str] = field(default_factory=list)  # besides USER_FILE: files it must leave alone
    timeout: float = 120.0
    sigint_after: float | None = None  # send SIGINT this long after start (seconds)
    twin: list[str] | None = None  # run this argv at the same time (concurrent runs)
    env: dict[str, str] = field(default_factory=dict)  # set for this invocation only


def _torch():
    import torch  # only the forging cases need it: the classifier's test stays fast

    from attncourse.train.runfiles import note_written
    return torch, note_written


def forge_checkpoint(change: Callable, name: str = "checkpoint.pt", record: bool = True):
    """A ``prepare`` rewriting every run's ``name`` with ``change(data)``; with ``record``, its
    digest re-recorded as a forger who edits the manifest too would."""
    def prepare(case: Path) -> None:
        torch, note_written = _torch()
        for path in sorted(case.glob(f"*/{name}")):
            data = torch.load(path, weights_only=True)
            data = change(data) if change else data
            torch.save(data, path)
            if record:
                note_written(path)
    return prepare


def _weight(make):
    def change(d):
        name = next(k for k, v in d["model_state"].items() if v.is_floating_point())
        d["model_state"][name] = make(d["model_state"][name])
        return d
    return change


def _entry(key, value):
    def change(d):
        d[key] = value
        return d
    return change


def _forgeries():
    torch, _ = _torch()

    def huge(d):
        for t in d["model_state"].values():
            if t.is_floating_point():
                t.fill_(1e38)
        return d

    def extra_weight(d):
        d["model_state"]["extra.weight"] = torch.zeros(2)
        return d

    return {
        "state-list": lambda d: _entry("model_state", list(d["model_state"].values()))(d),
        "extra-none": _entry("extra", None), "extra-entry": _entry("surprise", 1),
        "sparse": _weight(lambda t: t.to_sparse()),
        "meta": _weight(lambda t: torch.empty(t.shape, device="meta")),
        "expanded": _weight(lambda t: torch.zeros(1).expand(100_000, 100_000)),
        "int-weights": _weight(lambda t: t.to(torch.int64)),
        "class-bogus": _entry("model_class", "Bogus"), "class-seq2seq": _entry("model_class", "Seq2Seq"),
        "class-list": _entry("model_class", ["GPT"]), "config-list": _entry("model_config", [1, 2]),
        "extra-weight": extra_weight, "huge": huge, "epoch-negative": _entry("epoch", -3),
        "history-junk": _entry("history", [1, 2]),
    }


def _lm_commands() -> dict[str, list[str]]:
    steps = LM_TINY.index("--steps")
    return {
        "resume": ["train-lm", "--text", "text.txt", "--out", "lm", *LM_TINY[:steps], "--steps", "40",
                   *LM_TINY[steps + 2:], "--resume"],
        "sample": ["sample", "lm", "--length", "5", "--prompt", "h"],
        "sample-ntk": ["sample", "lm", "--length", "5", "--prompt", "h", "--rope-scaling", "ntk",
                       "--rope-factor", "2"],
        "sample-draft": ["sample", "lm", "--length", "5", "--prompt", "h", "--draft", "lm"],
    }


def _seq_commands() -> dict[str, list[str]]:
    return {
        "resume": ["train", "--train", "train.tsv", "--valid", "valid.tsv", "--out", "seq", *SEQ_TINY[:1], "2",
                   *SEQ_TINY[2:], "--resume"],
        "evaluate": ["evaluate", "seq", "--test", "test.tsv", "--json", "-"],
    }


def forged_checkpoint_cases() -> list[Case]:
    cases = []
    for kind, change in _forgeries().items():
        for name, argv in _lm_commands().items():
            cases.append(Case("forged checkpoint", f"lm {kind} {name}", argv, ("lm",),
                              forge_checkpoint(change), allowed=["lm"]))
        for name, argv in _seq_commands().items():
            file = "best.pt" if name == "evaluate" else "checkpoint.pt"
            cases.append(Case("forged checkpoint", f"seq {kind} {name}", argv, ("seq",),
                              forge_checkpoint(change, file), allowed=["seq"]))
    return cases


def spec_cases() -> list[Case]:
    cases = []
    values = {"rope_factor": [float("inf"), 2000.0, 1e308, "2", 0.5], "original_len": [10**12, -1, "16"],
              "base": [float("inf"), 1e30, 1.0], "eps": [float("inf"), 5.0, 0.0]}
    for key, options in values.items():
        for value in options:
            def change(d, key=key, value=value):
                part = "norm" if key == "eps" else "positions"
                spec = d["model_config"]["spec"][part]
                if key in ("rope_factor", "original_len"):
                    spec.update(rope_scaling="yarn", rope_factor=2.0, original_len=16)
                spec[key] = value
                return d
            cases.append(Case("forged spec", f"{key}={value!r}", ["sample", "gated", "--length", "5", "--prompt",
                                                                  "h"], ("gated",), forge_checkpoint(change),
                              allowed=["gated"]))
    return cases


def _write(rel: str, data: bytes | str) -> Callable[[Path], None]:
    def prepare(case: Path) -> None:
        path = case / rel
        if os.path.lexists(path):
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return prepare


def json_file_cases() -> list[Case]:
    nested = '{"a":' * 100_000 + "1" + "}" * 100_000
    deep_list = "[" * 100_000 + "]" * 100_000
    lm_config = json.loads(json.dumps({"context": 16}))
    cases = []
    for label, text in (("nested", nested), ("deep-list", deep_list), ("junk", "{"), ("null", "null"),
                        ("list", "[1, 2]"), ("huge-number", "1" * 5000), ("bad-utf8", b"\xff\xfe{}")):
        for rel, argv, needs in (
                ("seq/results.json", _seq_commands()["evaluate"], ("seq",)),
                ("seq/config.json", _seq_commands()["resume"], ("seq",)),
                ("lm/config.json", _lm_commands()["sample-ntk"], ("lm",)),
                ("lm/vocab.json", _lm_commands()["sample"], ("lm",)),
                ("lm/.attncourse-run.json", _lm_commands()["resume"], ("lm",))):
            cases.append(Case("forged json", f"{rel} {label}", argv, needs, _write(rel, text),
                              allowed=[needs[0]]))
    for context in (99999999999999999999, 0, 1.5, "16", True, None, -5):
        config = dict(lm_config, context=context)
        cases.append(Case("forged json", f"context={context!r}", _lm_commands()["sample-ntk"], ("lm",),
                          _merge_json("lm/config.json", config), allowed=["lm"]))
    for value in ("x", 2, None, 1e999):
        cases.append(Case("forged json", f"bidirectional={value!r}", _seq_commands()["evaluate"], ("seq",),
                          forge_checkpoint(lambda d, v=value: (d["model_config"].__setitem__("bidirectional", v),
                                                               d)[1], "best.pt"), allowed=["seq"]))
    return cases


def _merge_json(rel: str, values: dict) -> Callable[[Path], None]:
    def prepare(case: Path) -> None:
        path = case / rel
        data = json.loads(path.read_text())
        data.update(values)
        path.write_text(json.dumps(data))
    return prepare


def special_file_cases() -> list[Case]:
    cases = []

    def fifo(rel):
        def prepare(case):
            path = case / rel
            if os.path.lexists(path):
                path.unlink()
            os.mkfifo(path)
        return prepare

    def link(rel, target):
        def prepare(case):
            path = case / rel
            if os.path.lexists(path):
                path.unlink()
            path.symlink_to(target)
        return prepare

    inputs = {"--text": ["train-lm", "--out", "o", *LM_TINY, "--text"],
              "--test": ["evaluate", "seq", "--test"],
              "--train": ["train", "--valid", "valid.tsv", "--out", "o", *SEQ_TINY, "--train"]}
    for option, argv in inputs.items():
        needs = ("seq",) if option == "--test" else ()
        for special in ("fifo", "/dev/null", "/dev/zero", "folder"):
            prepare = fifo("special") if special == "fifo" else (
                (lambda c: (c / "special").mkdir()) if special == "folder" else None)
            target = "special" if special in ("fifo", "folder") else special
            cases.append(Case("special file", f"{option} {special}", [*argv, target], needs, prepare,
                              allowed=["o", "seq"], timeout=60))
    for rel, argv, needs in (("lm/config.json", _lm_commands()["sample-ntk"], ("lm",)),
                             ("lm/vocab.json", _lm_commands()["sample"], ("lm",)),
                             ("lm/checkpoint.pt", _lm_commands()["sample"], ("lm",)),
                             ("seq/results.json", _seq_commands()["evaluate"], ("seq",)),
                             ("seq/best.pt", _seq_commands()["evaluate"], ("seq",))):
        cases.append(Case("special file", f"{rel} fifo", argv, needs, fifo(rel), allowed=[needs[0]], timeout=60))
        cases.append(Case("special file", f"{rel} -> /dev/zero", argv, needs, link(rel, "/dev/zero"),
                          allowed=[needs[0]], timeout=60))
        cases.append(Case("symlinked run file", f"{rel} -> user file", argv, needs,
                          link(rel, str(Path("..") / USER_FILE)), allowed=[needs[0]], timeout=60))
    for rel in ("lm/checkpoint.pt", "lm/config.json", "lm/vocab.json"):
        cases.append(Case("symlinked run file", f"{rel} -> user file, --overwrite",
                          [*_lm_commands()["resume"][:-1], "--overwrite"], ("lm",),
                          link(rel, str(Path("..") / USER_FILE)), allowed=["lm"]))
    return cases


def overwrite_cases() -> list[Case]:
    cases = []
    forged = ({"attncourse_version": "0"}, {"corpus": "x", "positional": "rope"}, {"command": "train-lm"})
    names = ("checkpoint.pt", "history.json", "results.json", "vocab.json", "test.tsv", "best.pt")
    commands = {"train-lm": ["train-lm", "--text", "text.txt", "--out", "mine", *LM_TINY, "--overwrite"],
                "train": ["train", "--train", "train.tsv", "--valid", "valid.tsv", "--out", "mine", *SEQ_TINY,
                          "--overwrite"]}
    for command, argv in commands.items():
        for config in forged:
            def prepare(case, config=config):
                (case / "mine").mkdir()
                (case / "mine" / "config.json").write_text(json.dumps(config))
                for name in names:
                    (case / "mine" / name).write_text("the user's " + name)
            cases.append(Case("overwrite", f"{command} forged {sorted(config)}", argv, (), prepare,
                              allowed=["mine"], planted=[f"mine/{n}" for n in names] + ["mine/config.json"]))
        for out, label in (("/", "root"), ("home", "home")):
            cases.append(Case("root or home", f"{command} --out {label}",
                              [a if a != "mine" else out for a in argv], (), None, allowed=[]))
        for name in ("notes.txt", "checkpoint.pt", "vocab.json"):
            run = "lm" if command == "train-lm" else "seq"

            def plant(case, run=run, name=name):
                (case / run / name).write_text("the user's own")
            cases.append(Case("overwrite", f"{command} run + user {name}",
                              [a if a != "mine" else run for a in argv], (run,), plant, allowed=[run],
                              planted=[f"{run}/{name}"]))
    return cases


def damaged_checkpoint_cases(rng: random.Random) -> list[Case]:
    cases = []
    for _ in range(24):
        cut = rng.choice(["truncate", "flip"])
        fraction = rng.random()
        rel = rng.choice(["lm/checkpoint.pt", "seq/best.pt", "seq/checkpoint.pt"])
        record = rng.random() < 0.5  # half with the digest re-recorded: the loader's own checks see it

        def prepare(case, rel=rel, cut=cut, fraction=fraction, record=record):
            path = case / rel
            data = bytearray(path.read_bytes())
            at = int(len(data) * fraction)
            if cut == "truncate":
                data = data[:at]
            else:
                data[at:at + 64] = bytes(b ^ 0xFF for b in data[at:at + 64])
            path.write_bytes(bytes(data))
            if record:
                _torch()[1](path)
        run = rel.split("/")[0]
        argv = (_lm_commands()["sample"] if run == "lm" else
                _seq_commands()["evaluate" if rel.endswith("best.pt") else "resume"])
        cases.append(Case("damaged checkpoint", f"{rel} {cut} at {fraction:.2f} record={record}", argv, (run,),
                          prepare, allowed=[run]))
    return cases


def path_cases() -> list[Case]:
    long = "a" * 300
    return [
        Case("paths", "--json RUN/new/", ["evaluate", "seq", "--test", "test.tsv", "--json", "seq/new/"], ("seq",),
             allowed=["seq"]),
        Case("paths", "--predictions RUN/new/", ["evaluate", "seq", "--test", "test.tsv", "--predictions",
                                                 "seq/new/"], ("seq",), allowed=["seq"]),
        Case("paths", "--json overlong", ["evaluate", "seq", "--test", "test.tsv", "--json", long], ("seq",),
             allowed=["seq"]),
        Case("paths", "--out overlong", ["train-lm", "--text", "text.txt", "--out", long, *LM_TINY]),
        Case("paths", "--out under a file", ["train-lm", "--text", "text.txt", "--out", "afile/o", *LM_TINY],
             prepare=_write("afile", "x"), planted=["afile"]),
        Case("paths", "gpu-report under a file", ["gpu-report", "--smoke", "--device", "cpu", "afile/s/o"],
             prepare=_write("afile", "x"), planted=["afile"]),
        Case("paths", "student-edition bad utf-8", ["student-edition", "--notebooks", "nb", "out"],
             prepare=lambda c: ((c / "nb").mkdir(), (c / "nb" / "01_x.md").write_bytes(b"# T\n\xff\n")),
             allowed=["out"]),
        Case("paths", "student-edition under a file", ["student-edition", "--notebooks", "nb", "afile/out"],
             prepare=lambda c: ((c / "nb").mkdir(), (c / "nb" / "01_x.md").write_text("# T\n\nx\n"),
                                (c / "afile").write_text("x")), planted=["afile"]),
        Case("paths", "student-edition overlong", ["student-edition", "--notebooks", "nb", long],
             prepare=lambda c: ((c / "nb").mkdir(), (c / "nb" / "01_x.md").write_text("# T\n\nx\n"))),
        Case("paths", "generate non-utf-8", ["generate", "\udcff\udcfe"]),
        Case("paths", "read-only out", ["train-lm", "--text", "text.txt", "--out", "ro/o", *LM_TINY],
             prepare=lambda c: ((c / "ro").mkdir(), os.chmod(c / "ro", 0o555)), allowed=["ro"]),
    ]


def fuzz_cases(rng: random.Random, count: int) -> list[Case]:
    """Random values for the numeric options of every command: most fail fast, in parsing."""
    values = ["-1", "0", "1e400", "nan", "inf", "-inf", "\u0665", "\uff15", "", "--", "1" * 400, "0x10", "1_000",
              " 3", "3.5", "1e-400", "99999999999999999999", "٣.٥", "True", "None", "2**64"]
    commands = {
        "train-lm": (["train-lm", "--text", "text.txt", "--out", "o", *LM_TINY],
                     ["--steps", "--steps-per-epoch", "--context", "--d-model", "--num-heads", "--num-layers",
                      "--d-ff", "--lr", "--batch-size", "--max-chars", "--valid-fraction", "--threads", "--seed",
                      "--dropout", "--warmup", "--max-len"]),
        "train": (["train", "--train", "train.tsv", "--valid", "valid.tsv", "--out", "o", *SEQ_TINY],
                  ["--epochs", "--lr", "--batch-size", "--emb-dim", "--hidden-dim", "--max-tokens", "--threads",
                   "--seed", "--dropout", "--teacher-forcing", "--clip-norm", "--patience", "--time-budget"]),
        "sample": (["sample", "lm", "--prompt", "h", "--length", "5"],
                   ["--length", "--temperature", "--top-k", "--seed", "--rope-factor", "--draft-tokens"]),
        "evaluate": (["evaluate", "seq", "--test", "test.tsv", "--json", "-"],
                     ["--beam-size", "--length-penalty", "--batch-size", "--max-tokens", "--threads", "--edges"]),
    }
    cases = []
    for _ in range(count):
        command = rng.choice(sorted(commands))
        base, options = commands[command]
        argv = list(base)
        for _ in range(rng.choice([1, 1, 2])):
            option = rng.choice(options)
            value = rng.choice(values) if rng.random() < 0.8 else str(rng.choice([-(10**rng.randint(1, 30)),
                                                                                  10**rng.randint(1, 30),
                                                                                  rng.uniform(-1e6, 1e6)]))
            argv += [option, value]
        needs = ("lm",) if command == "sample" else ("seq",) if command == "evaluate" else ()
        cases.append(Case("option fuzzing", " ".join(argv[len(base):]), argv, needs,
                          allowed=["o", "lm", "seq"], timeout=180))
    return cases


def interrupt_cases(rng: random.Random) -> list[Case]:
    cases = []
    for _ in range(8):
        after = round(rng.uniform(2.0, 9.0), 2)
        cases.append(Case("interrupt", f"train transformer SIGINT at {after} s",
                          ["train", "--train", "train.tsv", "--valid", "valid.tsv", "--out", "o", "--model",
                           "transformer", "--epochs", "1000", "--d-model", "16", "--heads", "2", "--layers", "1",
                           "--d-ff", "32", "--batch-size", "16"], allowed=["o"], sigint_after=after))
        steps = LM_TINY.index("--steps")
        cases.append(Case("interrupt", f"train-lm SIGINT at {after} s",
                          ["train-lm", "--text", "text.txt", "--out", "o", *LM_TINY[:steps], "--steps", "100000",
                           *LM_TINY[steps + 2:]], allowed=["o"], sigint_after=after))
    return cases


def concurrent_cases() -> list[Case]:
    lm = ["train-lm", "--text", "text.txt", "--out", "o", *LM_TINY]
    seq = ["train", "--train", "train.tsv", "--valid", "valid.tsv", "--out", "o", *SEQ_TINY]
    return [Case("concurrent", f"two {argv[0]} into one --out ({i})", argv, allowed=["o"], twin=argv)
            for i in range(4) for argv in (lm, seq)] + [
        Case("concurrent", f"sample while resuming ({i})", _lm_commands()["sample"], ("lm",), allowed=["lm"],
             twin=_lm_commands()["resume"]) for i in range(4)]


#: A submission that is JSON but not a notebook, or a notebook no parser should choke on.
_NOT_NOTEBOOKS = {
    "empty object": "{}", "list": "[]", "null": "null", "cells 5": '{"cells": 5}',
    "cells abc": '{"cells": "abc"}', "cell empty": '{"cells": [{}]}',
    "source int": json.dumps({"cells": [{"cell_type": "code", "source": 5, "metadata": {},
                                         "outputs": []}], "metadata": {}, "nbformat": 4,
                              "nbformat_minor": 5}),
    "source ints": json.dumps({"cells": [{"cell_type": "code", "source": [1, 2], "metadata": {},
                                          "outputs": []}], "metadata": {}, "nbformat": 4,
                               "nbformat_minor": 5}),
    "no cell_type": json.dumps({"cells": [{"source": "x = 1"}], "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}),
    "cell_type 3": json.dumps({"cells": [{"cell_type": 3, "source": "x"}], "metadata": {},
                               "nbformat": 4, "nbformat_minor": 5}),
    "nbformat 3": json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}}),
    "metadata list": json.dumps({"cells": [], "metadata": [], "nbformat": 4, "nbformat_minor": 5}),
    "deep brackets": "[" * 100_000 + "]" * 100_000,
    "million minuses": json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                                              "source": "def my_softmax(x):\n    return "
                                                        + "-" * 1_000_000 + "1\n"}],
                                   "metadata": {}, "nbformat": 4, "nbformat_minor": 5}),
}
SUBMISSION = "04_self_attention.ipynb"


def _symlink(rel: str, target: str) -> Callable[[Path], None]:
    def prepare(case_dir: Path) -> None:
        (case_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(case_dir / target, case_dir / rel)
    return prepare


def _both(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def prepare(case_dir: Path) -> None:
        for step in steps:
            step(case_dir)
    return prepare


def course_cases() -> list[Case]:
    """The course commands (``grade``, ``student-edition``) and the training side's newer
    guards (``sample --draft`` on a fixed-state model, ``train-lm`` where training is refused):
    the cases of the command line's round 5 (issue 64)."""
    submission = _write(SUBMISSION, json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                                "nbformat_minor": 5}))
    grade = ["grade", SUBMISSION, "--limit", "20"]
    cases = [Case("course", f"grade a submission that is {name}", ["grade", SUBMISSION, "--limit", "20"],
                  prepare=_write(SUBMISSION, text), planted=[SUBMISSION], timeout=240)
             for name, text in _NOT_NOTEBOOKS.items()]
    cases += [
        Case("course", "grade --json onto a user file", [*grade, "--json", USER_FILE],
             prepare=submission, planted=[SUBMISSION], timeout=240),
        Case("course", "grade --json through a link to a user file", [*grade, "--json", "out.json"],
             prepare=_both(submission, _symlink("out.json", USER_FILE)),
             planted=[SUBMISSION], timeout=240),
        Case("course", "grade --json onto the submission itself", [*grade, "--json", SUBMISSION],
             prepare=submission, planted=[SUBMISSION], timeout=240),
        Case("course", "grade --json onto the chapter's source", [*grade, "--notebooks", "chapters",
                                                                     "--json", "chapters/04_self_attention.md"],
             prepare=_both(submission, _write("chapters/04_self_attention.md",
                                              (ROOT / "notebooks" / "04_self_attention.md").read_text())),
             planted=[SUBMISSION, "chapters/04_self_attention.md"], timeout=240),
        Case("course", "student-edition into a link to a folder outside", ["student-edition", "out/student",
                                                                             "--chapter", "04_self_attention"],
             prepare=_symlink("out/student", "user"), allowed=["out"], timeout=240),
        Case("course", "student-edition --overwrite into the home folder",
             ["student-edition", "home", "--overwrite", "--chapter", "04_self_attention"],
             prepare=_write("home/LICENSE", "the user's own licence\n"), planted=["home/LICENSE"],
             timeout=240),
        Case("course", "student-edition --overwrite into /",
             ["student-edition", "/", "--overwrite", "--chapter", "04_self_attention"], timeout=240),
        Case("course", "sample --draft with a fixed-state (DeltaNet) model",
             ["sample", "delta", "--draft", "1", "--length", "8", "--prompt", "the"], ("delta",),
             allowed=["delta"]),
        Case("course", "train-lm where training is refused",
             ["train-lm", "--text", "text.txt", "--out", "o", *LM_TINY], allowed=["o"],
             env={"ATTNCOURSE_NO_TRAINING": "1"}),
    ]
    return cases


def all_cases(seed: int, fuzz: int) -> list[Case]:
    """Every case, interleaved by category (round robin), so that a ``--limit`` samples them all."""
    rng = random.Random(seed)
    groups = [forged_checkpoint_cases(), spec_cases(), json_file_cases(), special_file_cases(), overwrite_cases(),
              damaged_checkpoint_cases(rng), path_cases(), fuzz_cases(rng, fuzz), interrupt_cases(rng),
              concurrent_cases(), course_cases()]
    for group in groups:
        rng.shuffle(group)
    order: list[Case] = []
    while any(groups):
        for group in groups:
            if group:
                order.append(group.pop(0))
    return order
