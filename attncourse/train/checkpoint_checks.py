"""Checks of a loaded checkpoint (``weights_only=True``) before anything uses it.

Its entries, types and tensors (:func:`structure_problem`), its model config against the
class's constructor (:func:`config_problem`), its weights against the model's.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

import torch

#: A checkpoint's entries and the types each may have (the layout of
#: :mod:`attncourse.train.checkpoint`); any other entry is refused.
ENTRIES: dict[str, tuple[type, ...]] = {
    "format": (str,),
    "version": (int,),
    "epoch": (int,),
    "model_class": (str, type(None)),
    "model_config": (dict, type(None)),
    "model_state": (dict,),
    "optimizer_state": (dict, type(None)),
    "scheduler_state": (dict, type(None)),
    "history": (list,),
    "extra": (dict,),
    "trainer": (dict,),
    "torch_version": (str,),
}
#: Entries every checkpoint has (``scheduler_state`` and ``torch_version`` came later).
REQUIRED = ("epoch", "model_state", "model_config", "history", "extra", "trainer")
#: Dtypes a saved tensor may have: what models, optimisers and generator states hold.
DTYPES = {
    torch.float64, torch.float32, torch.float16, torch.bfloat16,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
}


def _type_names(kinds: tuple[type, ...]) -> str:
    names = {dict: "a dict", list: "a list", str: "a string", int: "a whole number",
             type(None): "None"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _what(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "a tensor"
    if value is None:
        return "None"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def tensor_problem(tensor: torch.Tensor) -> str | None:
    """Why a loaded tensor is unusable (sparse, ``meta``, dtype, expanded), or None."""
    if tensor.layout != torch.strided:
        return f"a {str(tensor.layout).replace('torch.', '')} tensor (sparse), not a dense one"
    if tensor.is_meta:
        return "a 'meta' tensor, which has a shape but no values"
    if tensor.dtype not in DTYPES:
        return f"a tensor of dtype {str(tensor.dtype).replace('torch.', '')}"
    # an expanded tensor (stride 0) stores one value for many: its shape can ask for
    # 10**10 values from a file of a few bytes, and any copy allocates them all
    needed = tensor.numel() * tensor.element_size()
    if needed > tensor.untyped_storage().nbytes():
        shape = " x ".join(str(n) for n in tensor.shape)
        return (f"an expanded tensor ({shape}) whose values the file does not hold "
                "(its storage is smaller than its shape)")
    return None


def structure_problem(data: Any) -> str | None:
    """Why a loaded object is not a checkpoint (entries, types, tensors), or None."""
    if not isinstance(data, dict):
        return f"it holds {_what(data)}, not a checkpoint's dict"
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        return f"missing entries {missing}"
    unknown = sorted(str(key) for key in data if key not in ENTRIES)
    if unknown:
        return f"it holds entries no checkpoint has ({', '.join(unknown[:5])})"
    for key, kinds in ENTRIES.items():
        # isinstance: a state_dict is an OrderedDict; but True is no epoch
        if key in data and (not isinstance(data[key], kinds) or isinstance(data[key], bool)):
            return f"its {key!r} is {_what(data[key])}, not {_type_names(kinds)}"
    if data["epoch"] < 0:
        return f"its 'epoch' is {data['epoch']}, not a count of epochs"
    for name, value in data["model_state"].items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            return f"its 'model_state' maps {_what(name)} to {_what(value)}, not names to tensors"
    for i, row in enumerate(data["history"]):
        if not isinstance(row, dict):
            return f"its 'history' entry {i} is {_what(row)}, not a dict"
    for where, tensor in _tensors(data):
        problem = tensor_problem(tensor)
        if problem:
            return f"{where} is {problem}"
    return None


def _tensors(data: Mapping[str, Any]):
    """(where, tensor) for every tensor in ``data``, iteratively (no stack overflow)."""
    stack: list[tuple[str, Any]] = [(f"its {k}", v) for k, v in data.items()]
    while stack:
        where, value = stack.pop()
        if isinstance(value, torch.Tensor):
            yield where, value
        elif isinstance(value, Mapping):
            stack.extend((f"{where}[{k!r}]", v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))


# --- a model config against its class's constructor -------------------------------------------


def _fits(value: Any, hint: Any) -> bool:
    """True if ``value`` has annotated type ``hint`` (the forms constructors use)."""
    if hint is Any or hint is typing.Any:
        return True
    if hint is type(None) or hint is None:
        return value is None
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    origin = typing.get_origin(hint) or hint
    if origin is bool:
        return type(value) is bool
    if origin is int:
        return type(value) is int
    if origin is float:  # a whole number is a float setting's value too (1 for 1.0); inf is none
        return type(value) in (int, float) and math.isfinite(value)
    if origin is str:
        return type(value) is str
    if isinstance(origin, type) and (issubclass(origin, Mapping) or dataclasses.is_dataclass(origin)):
        return isinstance(value, dict)  # a spec's part as a dict: checked by its own fields
    return True  # a form no constructor uses: its own checks judge it


def _settings_problem(config: Mapping[str, Any], hints: Mapping[str, Any], where: str) -> str | None:
    for key, value in config.items():
        if key not in hints or key == "return":
            return f"{where} has a setting {key!r} that the model does not take"
        if not _fits(value, hints[key]):
            return f"{where} has {key} = {_what(value)}, not of its type ({_hint_name(hints[key])})"
    return None


def _hint_name(hint: Any) -> str:
    if hint is float:
        return "a finite number"
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def config_problem(cls: type, config: Mapping[str, Any]) -> str | None:
    """Why ``cls.from_config(config)`` must not run (a bad setting), or None."""
    hints = typing.get_type_hints(cls.__init__)
    problem = _settings_problem(config, hints, "its model config")
    if problem or not isinstance(config.get("spec"), dict):
        return problem
    return spec_problem(config["spec"])


def spec_problem(spec: Mapping[str, Any]) -> str | None:
    """:func:`config_problem` for a :class:`~attncourse.nn.spec.DecoderSpec` dict."""
    from attncourse.nn.spec import (  # the models' module, only when needed
        ATTENTION_VARIANTS,
        DecoderSpec,
    )

    hints = typing.get_type_hints(DecoderSpec)
    problem = _settings_problem(spec, hints, "its model spec")
    if problem:
        return problem
    parts = [(name, part) for name, part in spec.items() if name != "layer_attention"]
    per_layer = spec.get("layer_attention")
    if per_layer is not None and not isinstance(per_layer, (list, tuple)):
        return f"its model spec has layer_attention = {_what(per_layer)}, not a list of attentions"
    parts += [(f"layer_attention[{i}]", part) for i, part in enumerate(per_layer or ())]
    for name, part in parts:
        if not isinstance(part, dict):
            continue
        part = dict(part)
        if name.startswith(("attention", "layer_attention")):  # {"name": variant, its options...}
            variant = ATTENTION_VARIANTS.get(part.pop("name", "gqa"))
            if variant is None:
                continue  # the spec refuses an unknown variant in its own words
            part_type = variant.options
        else:
            part_type = hints[name]
        problem = _settings_problem(part, typing.get_type_hints(part_type), f"its model spec's {name}")
        if problem:
            return problem
    return None


# --- a checkpoint's values against a run's -------------------------------------------------------


def _describe(value: Any) -> str:
    if isinstance(value, Mapping) and isinstance(value.get("tokens"), list):
        tokens = value["tokens"]
        return f"a vocabulary of {len(tokens)} tokens"
    if isinstance(value, (list, tuple)) and len(value) > 6:
        return f"a list of {len(value)} items"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a.cpu(), b.cpu())
    return a == b


def differences(saved: Mapping[str, Any], current: Mapping[str, Any], label: str) -> list[str]:
    """One line per key that differs or only one side has, prefixed ``label``.

    E.g. ``"model config hidden_dim: 32 in the checkpoint, 64 in this run"``; nested
    dicts and equally long lists of dicts are compared key by key.
    """
    out = []
    for key in list(saved) + [k for k in current if k not in saved]:
        pair = (saved.get(key), current.get(key))
        if all(isinstance(value, Mapping) for value in pair):
            out += differences(*pair, f"{label} {key}")
        elif (all(isinstance(value, (list, tuple)) for value in pair) and len(pair[0]) == len(pair[1])
              and all(isinstance(value, Mapping) for value in (*pair[0], *pair[1]))):
            for i, (a, b) in enumerate(zip(*pair)):
                out += differences(a, b, f"{label} {key}[{i}]")
        elif key not in current:
            out.append(f"{label} {key}: {_describe(saved[key])} in the checkpoint, absent in this run")
        elif key not in saved:
            out.append(f"{label} {key}: absent in the checkpoint, {_describe(current[key])} in this run")
        elif not _same(saved[key], current[key]):
            a, b = _describe(saved[key]), _describe(current[key])
            if a == b:  # e.g. two vocabularies of the same size
                a, b = a + " (other tokens)", b
            out.append(f"{label} {key}: {a} in the checkpoint, {b} in this run")
    return out


# --- saved weights against the model that receives them ---------------------------------------


def state_problems(saved: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> list[str]:
    """Weights missing on one side or of another shape or dtype in ``expected``.

    ``expected`` may be on ``meta``: only shapes and dtypes are read.
    """
    problems = []
    for name in list(saved) + [n for n in expected if n not in saved]:
        if name not in expected:
            problems.append(f"parameter {name}: {tuple(saved[name].shape)} in the checkpoint, absent in "
                            "this run")
        elif name not in saved:
            problems.append(f"parameter {name}: absent in the checkpoint, {tuple(expected[name].shape)} in "
                            "this run")
        elif tuple(saved[name].shape) != tuple(expected[name].shape):
            problems.append(f"parameter {name}: {tuple(saved[name].shape)} in the checkpoint, "
                            f"{tuple(expected[name].shape)} in this run")
        elif saved[name].dtype != expected[name].dtype:
            problems.append(f"parameter {name}: {str(saved[name].dtype).replace('torch.', '')} in the "
                            f"checkpoint, {str(expected[name].dtype).replace('torch.', '')} in this run")
    return problems
