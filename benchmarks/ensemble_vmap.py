"""Training K seeds of one small model as one vmapped model, against K separate runs.

Do the seeds of a figure train faster together? K copies of the same model, their
parameters stacked along a new first dimension
(``torch.func.stack_module_state``), one loss per member through
``torch.func.functional_call``, the K gradients at once through
``torch.func.vmap(torch.func.grad_and_value(...))``, and one Adam over the
stacked tensors. Adam works element by element, so one Adam over the stack is K
Adams (same learning rate, same step count): member k follows exactly the
updates of its own run, up to the summation order of the batched kernels. What
it can save is the per-operation overhead of the K small models (one call
instead of K), which dominates when the tensors are small.

The model is chapter 3b's soft-attention captioner
(:func:`~attncourse.chapters.ch03b_attention_over_images.recipe.build_captioner`,
:class:`CaptionConfig`'s widths), whose three seeds the chapter trains in its
soft-against-hard figure. Each member has its own seed (initial weights) and its
own data order (batches drawn by a generator seeded with the member's seed), the
same in both paths. The teacher-forced loss is the captioner's forward pass written
with its public steps (``encode``, ``init_state``, ``decode_step``), because the
forward pass checks the labels' range with ``int(targets.min())``, which ``vmap``
cannot run on a batched tensor; it is checked equal to the forward pass's loss.

Before timing, both paths train ``--check-steps`` steps from the same seeds and the
members' parameters are asserted equal to the separate runs' (``--atol``). Then
each path is timed for ``--steps`` steps, alternately, ``--repeats`` times; a row
gives the CPU milliseconds per step (all K members; process time, so that the
load of a shared machine inflates neither) and the **ratio vmapped / separate**
(below 1: vmap is faster). Run it with ``OMP_NUM_THREADS=1`` to measure what a
chapter gets in the book build (one core per chapter).

Usage: ``OMP_NUM_THREADS=1 python benchmarks/ensemble_vmap.py [--members 3] [--batch 50 8] [--json OUT]``

Source: the ``torch.func`` documentation, "Model ensembling" tutorial
(``stack_module_state``, ``functional_call``, ``vmap``).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention import machine_info, print_machine, write_json  # noqa: E402

from attncourse.chapters.ch03b_attention_over_images.recipe import (  # noqa: E402
    CaptionConfig,
    build_captioner,
    load_canvases,
)
from attncourse.nn.image_attention import (  # noqa: E402
    ImageCaptioner,
    soft_attention_loss,
)


def teacher_forced_loss(model: ImageCaptioner, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean NLL per label under teacher forcing: the captioner's soft forward pass, vmap-safe.

    images (batch, 1, height, width) float, labels (batch, steps) long; returns a scalar.
    """
    enc = model.encode(images)
    state = model.init_state(enc)
    prev = torch.full(labels.shape[:1], model.start_id, dtype=torch.long, device=images.device)
    logits = []
    for t in range(labels.shape[1]):
        step_logits, state, _ = model.decode_step(prev, state, enc)
        logits.append(step_logits)
        prev = labels[:, t]
    return F.cross_entropy(torch.stack(logits, dim=1).flatten(0, 1), labels.flatten())


class _LossOf(nn.Module):
    """``loss_fn(model, *batch)`` as a module, so that ``functional_call`` can swap the model's tensors."""

    def __init__(self, model: nn.Module, loss_fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, *batch: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(self.model, *batch)


class Ensemble:
    """K models of the same architecture trained as one: stacked tensors, vmapped gradients, one Adam.

    Parameters
    ----------
    models : list of nn.Module
        K >= 1 models with the same parameter names and shapes (e.g. built
        with K seeds); their tensors are copied, the models are left alone.
    loss_fn : callable(model, *batch) -> scalar Tensor
        Must run under ``vmap``: no ``.item()``, ``int()`` or data-dependent
        branching on batch tensors, no random draws.
    lr : float
        Adam's learning rate.

    Raises
    ------
    ValueError
        If ``models`` is empty or their parameters differ in names or shapes.
    """

    def __init__(self, models: list[nn.Module], loss_fn: Callable[..., torch.Tensor], lr: float) -> None:
        if not models:
            raise ValueError("models must hold at least one model")
        shapes = [{k: tuple(v.shape) for k, v in m.named_parameters()} for m in models]
        if any(s != shapes[0] for s in shapes[1:]):
            raise ValueError("the models' parameters differ in names or shapes; an ensemble needs one architecture")
        params, buffers = stack_module_state(models)  # name -> (K, *shape)
        self.params = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        self.buffers = {k: v.detach().clone() for k, v in buffers.items()}
        # a skeleton on the meta device: functional_call reads its structure, never its tensors
        self.skeleton = _LossOf(copy.deepcopy(models[0]).to("meta"), loss_fn)
        self.optimizer = torch.optim.Adam(self.params.values(), lr=lr)

        def member_loss(params: dict, buffers: dict, *batch: torch.Tensor) -> torch.Tensor:
            tensors = {**{f"model.{k}": v for k, v in params.items()},
                       **{f"model.{k}": v for k, v in buffers.items()}}
            return functional_call(self.skeleton, tensors, batch)

        self._grads = vmap(grad_and_value(member_loss))

    def step(self, *batch: torch.Tensor) -> torch.Tensor:
        """One Adam step of every member; ``batch`` tensors are (K, member's batch...). Returns the K losses."""
        grads, losses = self._grads(self.params, self.buffers, *batch)
        for name, param in self.params.items():
            param.grad = grads[name]
        self.optimizer.step()
        return losses.detach()

    def member(self, k: int, into: nn.Module) -> nn.Module:
        """Copy member ``k``'s tensors into ``into`` (a model of the same architecture) and return it."""
        with torch.no_grad():
            into.load_state_dict({**{n: v[k] for n, v in self.params.items()},
                                  **{n: v[k] for n, v in self.buffers.items()}})
        return into


def member_orders(seeds: list[int], n: int, batch: int, steps: int) -> list[list[torch.Tensor]]:
    """For each seed, ``steps`` batches of indices into ``n`` examples, its own data order."""
    orders = []
    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        indices = torch.cat([torch.randperm(n, generator=gen) for _ in range(steps * batch // n + 1)])
        orders.append([indices[s * batch:(s + 1) * batch] for s in range(steps)])
    return orders


def run(config: CaptionConfig, seeds: list[int], batch: int, steps: int, check_steps: int, repeats: int,
        atol: float) -> dict:
    images, labels = load_canvases(config).train.tensors()
    orders = member_orders(seeds, len(images), batch, check_steps + steps * repeats * 2)

    def fresh_models() -> list[ImageCaptioner]:
        models = []
        for seed in seeds:
            torch.manual_seed(seed)
            models.append(build_captioner(config))
        return models

    separate = fresh_models()
    optimizers = [torch.optim.Adam(m.parameters(), lr=config.lr) for m in separate]
    ensemble = Ensemble(fresh_models(), teacher_forced_loss, lr=config.lr)
    cursor = {"separate": 0, "vmapped": 0}

    def separate_step() -> None:
        s = cursor["separate"]
        for model, optimizer, order in zip(separate, optimizers, orders):
            loss = teacher_forced_loss(model, images[order[s]], labels[order[s]])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        cursor["separate"] += 1

    def vmapped_step() -> None:
        s = cursor["vmapped"]
        index = torch.stack([order[s] for order in orders])  # (K, batch)
        ensemble.step(images[index], labels[index])
        cursor["vmapped"] += 1

    # the vmap-safe loss is the forward pass's loss
    probe = separate[0]
    first = orders[0][0]
    torch.testing.assert_close(teacher_forced_loss(probe, images[first], labels[first]),
                               soft_attention_loss(probe(images[first], labels[first]), labels[first]),
                               rtol=0, atol=1e-6)
    for _ in range(check_steps):
        separate_step()
        vmapped_step()
    worst = 0.0
    for k, model in enumerate(separate):
        for name, value in model.named_parameters():
            worst = max(worst, float((ensemble.params[name][k] - value).detach().abs().max()))
    if not worst <= atol:
        raise AssertionError(f"a member differs from its separate run by {worst:.2e} > atol {atol:.0e} "
                             f"after {check_steps} steps")
    times: dict[str, list[float]] = {"separate": [], "vmapped": []}
    for _ in range(repeats):
        for name, step in (("separate", separate_step), ("vmapped", vmapped_step)):
            start = time.process_time()
            for _ in range(steps):
                step()
            times[name].append((time.process_time() - start) / steps * 1e3)
    sep, vm = statistics.median(times["separate"]), statistics.median(times["vmapped"])
    return {"members": len(seeds), "batch": batch, "separate_ms": sep, "vmapped_ms": vm, "ratio": vm / sep,
            "max_abs_diff": worst, "check_steps": check_steps}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[3], help="K, seeds 0..K-1")
    parser.add_argument("--batch", type=int, nargs="+", default=[50, 8], help="images per member and step")
    parser.add_argument("--steps", type=int, default=20, help="steps per timing")
    parser.add_argument("--repeats", type=int, default=3, help="timings per path (median)")
    parser.add_argument("--check-steps", type=int, default=20, help="steps before the equality check")
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--n-train", type=int, default=500, help="training canvases drawn")
    parser.add_argument("--width-scale", type=float, default=1.0,
                        help="multiplies the captioner's widths (a smaller model: more overhead per flop)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    base = CaptionConfig(n_train=args.n_train, n_valid=1, n_test=1)
    scale = {k: max(2, round(getattr(base, k) * args.width_scale)) for k in
             ("feature_dim", "hidden_dim", "emb_dim", "channels")}
    config = CaptionConfig(**{**base.__dict__, **scale})
    info = machine_info([torch.device("cpu")])
    print_machine(info)
    print(f"chapter 3b's soft captioner, widths {scale}; Adam lr {config.lr}; CPU ms per step of all K "
          f"members (process time, median of {args.repeats}); ratio = vmapped / separate (below 1: vmap faster)")
    print(f"{'K':>3} {'batch':>6} {'separate ms':>12} {'vmapped ms':>11} {'ratio':>6} {'max |diff|':>11}")
    rows = []
    for k in args.members:
        for batch in args.batch:
            row = run(config, list(range(k)), batch, args.steps, args.check_steps, args.repeats, args.atol)
            rows.append(row)
            print(f"{k:>3} {batch:>6} {row['separate_ms']:>12.1f} {row['vmapped_ms']:>11.1f} "
                  f"{row['ratio']:>6.2f} {row['max_abs_diff']:>11.1e}", flush=True)
    if args.json:
        write_json(args.json, "ensemble_vmap", info, {**vars(args), **scale}, rows)
    return rows


if __name__ == "__main__":
    main()
