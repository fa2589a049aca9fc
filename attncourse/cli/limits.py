"""The ceilings of the command line's numeric options, and the check of a checkpoint's sizes.

Past some value an option's number allocates more memory than any machine has, overflows
float32 or int64, or runs for years. :data:`LIMITS` holds one range per option, with its
reason, from each field's ``limit`` (:data:`attncourse.cli.option_fields.COMMANDS`);
:func:`validate_limits` checks a parsed command (one line naming the option) and
:func:`validate_model_config` a checkpoint's sizes before its model is built. Each ceiling
is at least eight times what the largest preset (``gpu``) uses.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from typing import Any

from attncourse.cli.option_fields import COMMANDS, MAX_PROMPT_CHARS, command_fields
from attncourse.cli.parsing import option_name
from attncourse.train.config import NORM_EPS, ROPE_BASE, Limit


def _all_limits() -> dict[str, Limit]:
    """Option (argparse dest) -> its range, from every command's fields (``train``'s first)."""
    limits: dict[str, Limit] = {}
    for command in COMMANDS.values():
        for f in command.fields():
            if f.metadata["limit"] is not None:
                limits.setdefault(f.name, f.metadata["limit"])
    return limits


#: Option (argparse dest) -> its range, as the commands' fields declare it (``limit`` of
#: :func:`~attncourse.train.config.setting`); a checkpoint's sizes are held to the same ranges.
LIMITS: dict[str, Limit] = _all_limits()


def validate_limits(
    args: argparse.Namespace, flag: Callable[[str], str] | None = None
) -> str | None:
    """The first option of a parsed command out of its field's range, as one line; or None.

    The command's fields (:func:`~attncourse.cli.option_fields.command_fields`) give each
    option's range and flag (``train`` writes ``num_heads`` as ``--heads``);
    ``flag``, if given, spells an option instead.
    """
    for f in command_fields(args):
        limit = f.metadata["limit"]
        value = getattr(args, f.name, None)
        if limit is None or value is None or isinstance(value, (bool, str)):
            continue
        problem = limit.problem(value)
        if problem:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            return f"{flag(f.name) if flag else option_name(f)} {problem}, got {shown}"
    for beta in getattr(args, "betas", None) or ():
        if isinstance(beta, float) and not (0.0 <= beta < 1.0):
            return f"--betas must lie in [0, 1), got {beta:g}"
    edges = getattr(args, "edges", None) or ()
    if any(edge > LIMITS["max_tokens"].high for edge in edges):
        return f"--edges must be at most {LIMITS['max_tokens'].high} (the longest source --max-tokens allows)"
    prompt = getattr(args, "prompt", None)
    if getattr(args, "command", None) == "sample" and isinstance(prompt, str) and len(prompt) > MAX_PROMPT_CHARS:
        return (
            f"--prompt has {len(prompt):,} characters, at most {MAX_PROMPT_CHARS:,} are taken "
            "(the prompt is read in one pass whose attention memory grows with its square)"
        )
    return None


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
#: A spec's numbers that are no size, and their ranges: those of the options that set
#: them (``sample --rope-factor``; the training length is ``--context``), else the
#: spec's own (RoPE's base, a norm's epsilon). A spec with ``rope_factor`` 1e308 would
#: otherwise load, and sample NaN.
_CONFIG_NUMBERS = {
    "rope_factor": LIMITS["rope_factor"],
    "original_len": LIMITS["context"],
    "base": ROPE_BASE,
    "eps": NORM_EPS,
}


def validate_model_config(config: Any, where: str) -> None:
    """Check a checkpoint's ``model_config`` (from ``where``) against :data:`LIMITS`.

    Raises
    ------
    ValueError
        Naming ``where``, the size and its ceiling: a size not whole or out of range, or
        parameters that would not fit in the machine's memory.
    """
    if not isinstance(config, Mapping):
        return  # load_model says what is wrong with it
    config = _flat_spec(config)
    for key, limit in _CONFIG_NUMBERS.items():
        value = config.get(key)
        if value is None and key == "original_len" or key not in config:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where} is not a readable attncourse checkpoint: its model config has "
                             f"{key} = {value!r}, not a number")
        problem = limit.problem(value)
        if problem:
            raise ValueError(f"{where} asks for a model with {key} {value:g}, which {problem}; refused "
                             "before building it")
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
    validate_memory(4 * estimate_parameters(config), f"the model of {where}")


def _flat_spec(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A spec-built GPT's config (``{"spec": {..., "ffn": {"d_ff": ...}}}``) with its sizes on one level.

    Its parts' sizes (``d_ff`` in ``ffn``, ``num_kv_heads`` in ``attention``) count as the
    keyword-built config's do; a part's size never overrides one of the spec's own. A
    hybrid's blocks (``layer_attention``, a list of parts) count by their largest size.
    """
    spec = config.get("spec")
    if not isinstance(spec, Mapping):
        return config
    flat = {key: value for key, value in spec.items() if not isinstance(value, (Mapping, list, tuple))}
    own = set(flat)
    for part in spec.values():
        parts = [part] if isinstance(part, Mapping) else (
            [p for p in part if isinstance(p, Mapping)] if isinstance(part, (list, tuple)) else [])
        for entry in parts:
            for key, value in entry.items():
                if key not in flat or (key not in own and _larger(value, flat[key])):
                    flat[key] = value
    return flat


def _larger(value: Any, than: Any) -> bool:
    """True if ``value`` is a number above ``than``, or ``than`` is None and ``value`` is not."""
    if than is None:
        return value is not None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (value, than))
    return numbers and value > than


def validate_finite(model: Any, where: Any) -> None:
    """Raise ValueError naming the file and the first weight that holds NaN or an infinity.

    Such a checkpoint (a diverged training, a damaged file) would otherwise end
    in torch's "probability tensor contains either inf, nan" while sampling.
    """
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(tensor.isfinite().all()):
            raise ValueError(f"{where} is broken: its weights hold NaN or infinite values ({name}); "
                             "a training that diverged, or a damaged file")


def guard_logits(model: Any, where: Any) -> None:
    """Make every forward pass of ``model`` raise ValueError naming ``where`` if its logits are
    not finite (finite weights can still overflow float32 on the way).
    """

    def check(module: Any, inputs: Any, output: Any) -> None:
        logits = output[0] if isinstance(output, tuple) else output
        if not bool(logits.isfinite().all()):
            raise ValueError(f"{where} is broken: its weights are finite, but the model's outputs (logits) "
                             "overflow to infinite or NaN values; a training that diverged, or a damaged file")

    model.register_forward_hook(check)


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


def validate_memory(needed: int, what: str) -> None:
    """Raise MemoryError with :func:`memory_problem`'s line if ``needed`` bytes do not fit."""
    problem = memory_problem(needed, what)
    if problem:
        raise MemoryError(problem)


def seq2seq_training_bytes(args: argparse.Namespace, src_len: int, tgt_len: int, tgt_vocab: int,
                           batch: int | None = None) -> int:
    """Rough bytes one ``train`` step holds besides the weights (float32), for the longest pairs:
    logits, log-softmax and gradient (3 x batch x tgt_len x vocab), per layer and token about
    12 d + 2 d_ff numbers (Transformer) or 8 hidden + 4 embedding (RNN), and attention weights
    3 x heads x length^2 per sequence.
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
