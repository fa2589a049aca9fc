"""The ceilings of the command line's numeric options, and the check of a checkpoint's sizes.

Every number a user (or a checkpoint found somewhere) gives the command line
ends up as a tensor size, a float32 scalar, a seed or a loop count. Past some
value each of them either allocates more memory than any machine has, overflows
float32 (3.4e38) or int64, or runs for years; before this module such values
ended in a traceback or an out-of-memory kill. :data:`LIMITS` states one range
per option, with the reason; :func:`check_limits` checks a parsed command
against it (one line naming the option), :func:`document_limits` writes the
ranges into ``--help``, and :func:`check_model_config` holds a checkpoint's
model sizes to the same ceilings *before* the model is built, so that an
untrusted file cannot choose how much memory is allocated.

The ceilings are generous: each is at least eight times what the course's
largest preset (the base Transformer, the ``gpu`` preset) uses.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from typing import Any

from attncourse.recipes.experiment import Experiment
from attncourse.train.config import FLOAT32, SIZE, TIME, FitConfig, Limit, settings
from attncourse.train.config import format_number as _fmt

#: The ranges of the options that are not settings of a training run (those are declared with their
#: fields, :func:`~attncourse.train.config.setting`'s ``limit``). The same dest has the same range in every
#: sub-command.
_OTHER_LIMITS: dict[str, Limit] = {
    # model sizes (train-lm; and the sizes in a checkpoint's config)
    "num_kv_heads": Limit(1, 64, SIZE),
    "max_len": Limit(1, 8192, "positions; attention memory grows with its square"),
    "context": Limit(1, 8192, "attention memory grows with its square"),
    "window": Limit(1, 8192, "a window wider than --max-len's ceiling changes nothing"),
    "draft_tokens": Limit(1, 64, "each round runs the draft model that many times"),
    "latent_dim": Limit(1, 4096, SIZE),  # MLA (chapter 10)
    "rope_dim": Limit(0, 4096, SIZE),
    # data
    "max_tokens": Limit(1, 2048, "attention memory grows with the square of the length"),
    "max_value": Limit(1, 10**9, "number words are generated up to nine digits"),
    "max_chars": Limit(1, 10**9, "the text is held in memory"),
    "valid_fraction": Limit(0.0, 1.0, "a share of the text", open_low=True),
    # budget
    "steps": Limit(1, 100_000_000, TIME),
    "steps_per_epoch": Limit(1, 100_000_000, TIME),
    "budget": Limit(0.0, 10_000_000.0, "seconds; about four months", open_low=True),
    # decoding
    "beam_size": Limit(1, 64, "memory grows with it"),
    "length_penalty": Limit(0.0, 10.0, FLOAT32),
    "length": Limit(1, 8192, "characters to generate, with the prompt"),
    "top_k": Limit(1, 1_000_000, "a vocabulary's size"),
    "temperature": Limit(0.01, 100.0, "logits divided by it overflow or flatten float32 beyond it"),
    # machine
    "threads": Limit(1, 256, "torch's thread pool"),
}
#: Option (argparse dest) -> its range: the training settings' (model sizes, data, budget, optimiser) and
#: the other options'.
LIMITS: dict[str, Limit] = {
    **{f.name: f.metadata["limit"] for f in settings(Experiment, FitConfig) if f.metadata["limit"]},
    **_OTHER_LIMITS,
}
#: Characters of a ``sample --prompt``: the prompt is one forward pass with a (length x length) mask.
MAX_PROMPT_CHARS = 8192


def check_limits(
    args: argparse.Namespace, flag: Callable[[str], str] | None = None
) -> str | None:
    """The first option of a parsed command out of its range in :data:`LIMITS`, as one line; or None.

    ``flag`` spells an argparse dest as the command's option (``train`` writes
    ``num_heads`` as ``--heads``); default ``--`` and the dest with dashes.
    """
    flag = flag or (lambda dest: "--" + dest.replace("_", "-"))
    for dest, limit in LIMITS.items():
        value = getattr(args, dest, None)
        if value is None or isinstance(value, (bool, str)):
            continue
        problem = limit.problem(value)
        if problem:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            return f"{flag(dest)} {problem}, got {shown}"
    for beta in getattr(args, "betas", None) or ():
        if isinstance(beta, float) and not (0.0 <= beta < 1.0):
            return f"--betas must lie in [0, 1), got {beta:g}"
    edges = getattr(args, "edges", None) or ()
    if any(edge > LIMITS["max_tokens"].high for edge in edges):
        return f"--edges must be at most {LIMITS['max_tokens'].high} (the longest source --max-tokens allows)"
    prompt = getattr(args, "prompt", None)
    if isinstance(prompt, str) and len(prompt) > MAX_PROMPT_CHARS:
        return (
            f"--prompt has {len(prompt):,} characters, at most {MAX_PROMPT_CHARS:,} are taken "
            "(the prompt is read in one pass whose attention memory grows with its square)"
        )
    return None


def document_limits(parser: argparse.ArgumentParser) -> None:
    """Append each option's range to its ``--help`` line, in every sub-command of ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                document_limits(sub)
        elif action.dest in LIMITS and action.help not in (None, argparse.SUPPRESS):
            limit = LIMITS[action.dest]
            action.help = f"{action.help} [at most {_fmt(limit.high)}]"


#: Keys of a checkpoint's model config that size a tensor, and the option each corresponds to.
_CONFIG_SIZES = {
    "d_model": "d_model",
    "d_ff": "d_ff",
    "num_heads": "num_heads",
    "num_kv_heads": "num_kv_heads",
    "num_layers": "num_layers",
    "num_encoder_layers": "num_layers",
    "num_decoder_layers": "num_layers",
    "emb_dim": "emb_dim",
    "hidden_dim": "hidden_dim",
    "max_len": "max_len",
    "window": "window",
    "max_src_len": "max_len",
    "latent_dim": "latent_dim",
    "rope_dim": "rope_dim",
}
#: Most tokens a vocabulary of a checkpoint may hold (an embedding table of vocab_size x d_model).
MAX_VOCAB = 1_000_000


def check_model_config(config: Any, where: str) -> None:
    """Raise ValueError unless a checkpoint's model config sizes stay within :data:`LIMITS`.

    Parameters
    ----------
    config : dict
        A checkpoint's ``model_config``, before the model is built from it.
    where : str
        The checkpoint's path, named in the message.

    Raises
    ------
    ValueError
        ``"<where> asks for a model with max_len 1000000000, above the ceiling 8,192 ..."``
        for a size that is not a whole number or lies outside its range, or a
        model whose parameters would not fit in the machine's memory.
    """
    if not isinstance(config, Mapping):
        return  # load_model says what is wrong with it
    config = _flat_spec(config)
    for key, value in config.items():
        option = _CONFIG_SIZES.get(key)
        if option is None and key not in (
            "vocab_size",
            "src_vocab_size",
            "tgt_vocab_size",
        ):
            continue
        if value is None and key in ("num_kv_heads", "window", "max_src_len"):
            continue
        limit = LIMITS[option] if option else Limit(1, MAX_VOCAB, "an embedding table")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(
                f"{where} is not a readable attncourse checkpoint: its model config has "
                f"{key} = {value!r}, not a whole number"
            )
        problem = limit.problem(value)
        if problem:
            raise ValueError(
                f"{where} asks for a model with {key} {value:,}, which {problem}; "
                "refused before allocating it"
            )
    check_memory(4 * estimate_parameters(config), f"the model of {where}")


def _flat_spec(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A spec-built GPT's config (``{"spec": {..., "ffn": {"d_ff": ...}}}``) with its sizes on one level.

    Its parts' sizes (``d_ff`` in ``ffn``, ``num_kv_heads`` in ``attention``) count as the
    keyword-built config's do; a part's size never overrides one of the spec's own.
    """
    spec = config.get("spec")
    if not isinstance(spec, Mapping):
        return config
    flat = {key: value for key, value in spec.items() if not isinstance(value, Mapping)}
    for part in spec.values():
        if isinstance(part, Mapping):
            for key, value in part.items():
                flat.setdefault(key, value)
    return flat


def check_finite(model: Any, where: Any) -> None:
    """Raise ValueError naming the file and the first weight that holds NaN or an infinity.

    Such a checkpoint (a diverged training, a damaged file) would otherwise end
    in torch's "probability tensor contains either inf, nan" while sampling.
    """
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(tensor.isfinite().all()):
            raise ValueError(f"{where} is broken: its weights hold NaN or infinite values ({name}); "
                             "a training that diverged, or a damaged file")


def estimate_parameters(config: Mapping[str, Any]) -> int:
    """A rough upper estimate of a model config's parameter count (embeddings, layers, positions)."""

    def size(key: str, default: int = 0) -> int:
        value = config.get(key)
        return (
            value if isinstance(value, int) and not isinstance(value, bool) else default
        )

    d = max(size("d_model"), size("emb_dim"), size("hidden_dim"), 1)
    layers = (
        size("num_layers") + size("num_encoder_layers") + size("num_decoder_layers") + 1
    )
    vocab = size("vocab_size") + size("src_vocab_size") + size("tgt_vocab_size")
    per_layer = 8 * d * d + 2 * d * max(size("d_ff"), 4 * d)
    return (
        vocab * d * 2
        + layers * per_layer
        + size("max_len") * d
        + size("max_src_len") * d
    )


def available_memory() -> int | None:
    """Bytes of memory the machine can still give (``MemAvailable`` of /proc/meminfo), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_problem(needed: int, what: str) -> str | None:
    """One line if ``needed`` bytes exceed what the machine has available, else None."""
    free = available_memory()
    if free is not None and needed > free:
        return (
            f"{what} needs about {needed / 2**30:.1f} GiB of memory, and this machine has "
            f"{free / 2**30:.1f} GiB available"
        )
    return None


def check_memory(needed: int, what: str) -> None:
    """Raise MemoryError with :func:`memory_problem`'s line if ``needed`` bytes do not fit."""
    problem = memory_problem(needed, what)
    if problem:
        raise MemoryError(problem)


def seq2seq_training_bytes(args: argparse.Namespace, src_len: int, tgt_len: int, tgt_vocab: int,
                           batch: int | None = None) -> int:
    """Rough bytes one ``train`` step holds besides the weights (float32), for the longest pairs.

    Logits, their log-softmax and gradient: 3 x batch x target length x target
    vocabulary. Per layer and token, what backpropagation keeps: about 12 d + 2 d_ff
    numbers (a Transformer) or 8 hidden + 4 embedding numbers (an RNN, per step); and
    a Transformer's attention weights, their softmax and dropout: 3 x heads x
    length^2 per sequence (self-attention and cross-attention).
    """
    batch = int(args.batch_size) if batch is None else batch  # a batch holds at most the training pairs
    tokens = batch * (src_len + tgt_len)
    logits = 3 * batch * tgt_len * tgt_vocab
    if getattr(args, "kind", None) == "transformer":
        layers = 2 * int(args.num_layers)
        per_layer = tokens * (12 * int(args.d_model) + 2 * int(args.d_ff)) \
            + 3 * batch * int(args.num_heads) * (src_len + tgt_len) ** 2
    else:
        layers = 2
        per_layer = tokens * (8 * int(args.hidden_dim) + 4 * int(args.emb_dim)) + batch * src_len * tgt_len
    return 4 * (logits + layers * per_layer)


def training_memory_problem(args: argparse.Namespace) -> str | None:
    """:func:`memory_problem` for training the model a parsed ``train``/``train-lm`` command sizes.

    16 bytes a parameter: the weights, their gradients and Adam's two moments,
    in float32 (activations come on top, bounded by the batch and length ceilings).
    """
    sizes = {k: getattr(args, k, None) for k in ("d_model", "d_ff", "num_layers", "emb_dim", "hidden_dim")}
    sizes = {k: v for k, v in sizes.items() if isinstance(v, int)}
    if getattr(args, "command", None) == "train" and "num_layers" in sizes:
        sizes["num_encoder_layers"] = sizes["num_decoder_layers"] = sizes.pop("num_layers")
    flag = "these model options" if sizes else "this model"
    return memory_problem(16 * estimate_parameters(sizes), f"training with {flag} (weights, gradients, Adam)")
