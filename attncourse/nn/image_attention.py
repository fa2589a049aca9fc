"""Show, attend and tell: a recurrent decoder attending over an image grid.

Source: Xu et al. (2015), "Show, Attend and Tell", sections 3.1, 4.1, 4.2, eqs.
(4)-(14).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attncourse.functional.validation import validate_positive_ints
from attncourse.nn.additive import AdditiveAttention
from attncourse.nn.pooling import MaxPool2d

#: The values of ``ImageCaptioner(attention=...)``.
IMAGE_ATTENTION_KINDS: tuple[str, ...] = ("soft", "hard", "gumbel")

#: The values of ``hard_attention_loss(reward=...)``.
REWARD_KINDS: tuple[str, ...] = ("log_likelihood", "correct")

_TINY = torch.finfo(torch.float32).tiny


class ConvEncoder(nn.Module):
    """A small CNN that turns an image into a grid of L annotation vectors a_i.

    Raises ``ValueError`` for a non-positive size, or ``feature_dim < 3`` with
    coordinates. Source: Xu et al. (2015), section 3.1.1.
    """

    def __init__(
        self, in_channels: int = 1, feature_dim: int = 64, channels: int = 32,
        num_blocks: int = 2, coordinates: bool = True,
    ) -> None:
        super().__init__()
        validate_positive_ints(in_channels=in_channels, feature_dim=feature_dim, channels=channels,
                            num_blocks=num_blocks)
        if coordinates and feature_dim < 3:
            raise ValueError(f"feature_dim must be at least 3 with coordinates (2 of them), got {feature_dim}")
        self.in_channels, self.feature_dim = int(in_channels), int(feature_dim)
        self.num_blocks, self.coordinates = int(num_blocks), bool(coordinates)
        cnn_out = self.feature_dim - (2 if coordinates else 0)
        layers: list[nn.Module] = []
        width_in = self.in_channels
        for block in range(self.num_blocks):
            width_out = cnn_out if block == self.num_blocks - 1 else int(channels)
            layers += [nn.Conv2d(width_in, width_out, 3, padding=1), nn.ReLU(), MaxPool2d(2)]
            width_in = width_out
        self.cnn = nn.Sequential(*layers)

    @property
    def stride(self) -> int:
        """Pixels between neighbouring grid locations: ``2 ** num_blocks``."""
        return 2 ** self.num_blocks

    def grid_shape(self, height: int, width: int) -> tuple[int, int]:
        """(grid rows, grid columns) for an image of ``height x width`` pixels."""
        return height // self.stride, width // self.stride

    def validate_images(self, images: torch.Tensor) -> None:
        """Raise ``ValueError`` unless ``images`` is (batch, in_channels, H, W)."""
        if images.dim() != 4 or images.shape[1] != self.in_channels:
            raise ValueError(
                f"images must be (batch, channels={self.in_channels}, height, width), got {tuple(images.shape)}"
            )
        if images.shape[2] < self.stride or images.shape[3] < self.stride:
            raise ValueError(
                f"images {tuple(images.shape)} are too small for the encoder: {self.num_blocks} pooling "
                f"blocks need height and width >= {self.stride}"
            )

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """Annotations (batch, L, feature_dim) and the grid (rows, cols) of ``images``.

        ``images`` is (batch, in_channels, height, width). Raises ``ValueError`` for a
        wrong channel count or an image smaller than ``2 ** num_blocks`` pixels.
        """
        self.validate_images(images)
        maps = self.cnn(images)  # (batch, cnn_out, rows, cols)
        batch, _, rows, cols = maps.shape
        features = maps.flatten(2).transpose(1, 2)  # (batch, L, cnn_out)
        if self.coordinates:
            row_pos = torch.linspace(-1.0, 1.0, rows, device=maps.device) if rows > 1 else maps.new_zeros(1)
            col_pos = torch.linspace(-1.0, 1.0, cols, device=maps.device) if cols > 1 else maps.new_zeros(1)
            coords = torch.stack(torch.meshgrid(col_pos, row_pos, indexing="xy"), dim=-1)  # (rows, cols, 2)
            coords = coords.reshape(1, rows * cols, 2).expand(batch, -1, -1).to(features.dtype)
            features = torch.cat([features, coords], dim=-1)
        return features, (rows, cols)


@dataclass
class ImageEncoding:
    """What the decoder reads from the encoder, computed once per batch of images."""

    features: torch.Tensor
    projected_keys: torch.Tensor
    grid: tuple[int, int]


@dataclass
class ImageAttentionOutput:
    """Output of :meth:`ImageCaptioner.forward`."""

    logits: torch.Tensor
    weights: torch.Tensor
    context: torch.Tensor
    sampled: torch.Tensor | None
    log_probs: torch.Tensor | None
    grid: tuple[int, int]
    expected: torch.Tensor | None = None

    @property
    def effective_weights(self) -> torch.Tensor:
        """(batch, steps, L): the weights z_t was actually read with."""
        if self.sampled is None:
            return self.weights
        one_hot = F.one_hot(self.sampled, self.weights.shape[-1]).to(self.weights.dtype)
        if self.expected is None:
            return one_hot
        return torch.where(self.expected[:, None, None], self.weights, one_hot)

    def weight_maps(self, effective: bool = False) -> torch.Tensor:
        """The weights as images, (batch, steps, grid rows, grid columns)."""
        weights = self.effective_weights if effective else self.weights
        return weights.reshape(*weights.shape[:2], *self.grid)


class ImageCaptioner(nn.Module):
    """CNN encoder + GRU decoder with soft, hard or Gumbel attention over the grid.

    Raises ``ValueError`` if ``attention`` is unknown or a size is not positive. Source:
    Xu et al. (2015), sections 3.1 and 4.
    """

    def __init__(
        self,
        num_classes: int = 10,
        attention: str = "soft",
        feature_dim: int = 64,
        hidden_dim: int = 128,
        emb_dim: int = 32,
        attn_dim: int | None = None,
        channels: int = 32,
        in_channels: int = 1,
        num_blocks: int = 2,
        coordinates: bool = True,
        tau: float = 1.0,
        expectation_prob: float = 0.0,
    ) -> None:
        super().__init__()
        if attention not in IMAGE_ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {IMAGE_ATTENTION_KINDS}, got {attention!r}")
        attn_dim = hidden_dim if attn_dim is None else attn_dim
        validate_positive_ints(num_classes=num_classes, hidden_dim=hidden_dim, emb_dim=emb_dim, attn_dim=attn_dim)
        if not tau > 0:
            raise ValueError(f"tau must be positive, got {tau}")
        if not 0.0 <= expectation_prob < 1.0 or (expectation_prob and attention != "hard"):
            raise ValueError(
                f"expectation_prob must lie in [0, 1), and be 0 unless attention='hard'; "
                f"got {expectation_prob} with attention={attention!r}"
            )
        self.config: dict[str, Any] = {
            "num_classes": int(num_classes), "attention": attention, "feature_dim": int(feature_dim),
            "hidden_dim": int(hidden_dim), "emb_dim": int(emb_dim), "attn_dim": int(attn_dim),
            "channels": int(channels), "in_channels": int(in_channels), "num_blocks": int(num_blocks),
            "coordinates": bool(coordinates), "tau": float(tau), "expectation_prob": float(expectation_prob),
        }
        self.expectation_prob = float(expectation_prob)
        self.kind = attention
        self.num_classes, self.hidden_dim, self.tau = int(num_classes), int(hidden_dim), float(tau)
        self.start_id = self.num_classes
        self.encoder = ConvEncoder(in_channels, feature_dim, channels, num_blocks, coordinates)
        self.embedding = nn.Embedding(self.num_classes + 1, emb_dim)
        self.init_proj = nn.Linear(feature_dim, hidden_dim)  # W_init
        self.attention = AdditiveAttention(hidden_dim, feature_dim, attn_dim)
        self.cell = nn.GRUCell(emb_dim + feature_dim, hidden_dim)
        self.output = nn.Linear(hidden_dim + feature_dim + emb_dim, self.num_classes)  # W_o, b_o

    def encode(self, images: torch.Tensor) -> ImageEncoding:
        """Annotations a_i and their projections U_a a_i of ``images``."""
        features, grid = self.encoder(images)
        return ImageEncoding(features=features, projected_keys=self.attention.project_keys(features), grid=grid)

    def init_state(self, enc: ImageEncoding) -> torch.Tensor:
        """h_0 = tanh(W_init mean_i a_i), shape (batch, hidden_dim)."""
        return torch.tanh(self.init_proj(enc.features.mean(dim=1)))

    def scores(self, state: torch.Tensor, enc: ImageEncoding) -> torch.Tensor:
        """e_ti = v_a^T tanh(W_a h_{t-1} + U_a a_i) (eq. (4)), shape (batch, L)."""
        if state.shape != (enc.features.shape[0], self.hidden_dim):
            raise ValueError(
                f"state must be (batch, hidden_dim) = {(enc.features.shape[0], self.hidden_dim)} to fit "
                f"the features {tuple(enc.features.shape)}, got {tuple(state.shape)}"
            )
        query = state @ self.attention.w_a.T  # W_a h_{t-1}: (batch, attn_dim)
        return torch.tanh(query.unsqueeze(1) + enc.projected_keys) @ self.attention.v_a

    def attend(
        self, state: torch.Tensor, enc: ImageEncoding, sample: bool, location: torch.Tensor | None = None,
        use_expectation: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Weights alpha_t (batch, L) and context z_t (batch, feature_dim) for one step.

        Also the sampled location (batch,) and its log-probability for hard attention
        (else None); ``location`` forces it.
        """
        scores = self.scores(state, enc)
        weights = torch.softmax(scores, dim=-1)  # alpha_ti (eq. (5))
        expectation = (weights.unsqueeze(1) @ enc.features).squeeze(1)  # sum_i alpha_ti a_i (eq. (13))
        if self.kind == "soft":
            return expectation, weights, None, None
        # log alpha from the scores, not log(alpha): exact where alpha underflows to 0.
        log_weights = torch.log_softmax(scores, dim=-1)
        noise = torch.zeros_like(weights)
        if self.kind == "gumbel" and sample and location is None:
            # Gumbel(0, 1) noise: argmax_i (log alpha_ti + g_i) is a draw from alpha_t.
            uniform = torch.rand_like(weights).clamp(_TINY, 1.0 - 1e-7)
            noise = -torch.log(-torch.log(uniform))
        if location is not None:
            chosen = location
        elif not sample:
            chosen = weights.argmax(dim=-1)
        elif self.kind == "hard":
            # s_t ~ Multinoulli(alpha_t) (eq. (8)); sampling carries no gradient.
            chosen = torch.multinomial(weights.detach(), 1).squeeze(1)
        else:
            chosen = (log_weights + noise).argmax(dim=-1)
        log_prob = log_weights.gather(1, chosen[:, None]).squeeze(1)
        one_hot = F.one_hot(chosen, weights.shape[-1]).to(weights.dtype)
        if self.kind == "gumbel" and self.training:
            # Straight-through: the forward pass reads the one-hot location, the
            # backward pass takes the gradient of softmax((log alpha + g) / tau).
            soft = torch.softmax((log_weights + noise) / self.tau, dim=-1)
            one_hot = one_hot + soft - soft.detach()
            context = (one_hot.unsqueeze(1) @ enc.features).squeeze(1)
        else:
            context = enc.features[torch.arange(len(chosen), device=chosen.device), chosen]  # z_t = a_{s_t}
            if use_expectation is not None:
                context = torch.where(use_expectation[:, None], expectation, context)
        return context, weights, chosen, log_prob

    def decode_step(
        self, prev_tokens: torch.Tensor, state: torch.Tensor, enc: ImageEncoding,
        sample: bool = False, location: torch.Tensor | None = None, use_expectation: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor, Any, Any]]:
        """From y_{t-1} (batch,) and h_{t-1} to logits (batch, num_classes) and h_t."""
        context, weights, chosen, log_prob = self.attend(state, enc, sample, location, use_expectation)
        y_prev = self.embedding(prev_tokens)
        new_state = self.cell(torch.cat([y_prev, context], dim=-1), state)
        logits = self.output(torch.cat([new_state, context, y_prev], dim=-1))
        return logits, new_state, (context, weights, chosen, log_prob)

    def forward(
        self,
        images: torch.Tensor,
        targets: torch.Tensor | None = None,
        num_steps: int | None = None,
        sample: bool | None = None,
        locations: torch.Tensor | None = None,
    ) -> ImageAttentionOutput:
        """Read ``images`` (batch, in_channels, H, W) step by step.

        ``targets`` is (batch, steps). Raises ``ValueError`` for a wrong image shape,
        targets that do not fit or are out of range, a missing ``num_steps``, or
        ``locations`` with soft attention.
        """
        self.encoder.validate_images(images)
        batch = images.shape[0]
        if targets is not None:
            if targets.dim() != 2 or targets.shape[0] != batch:
                raise ValueError(
                    f"targets must be (batch, steps) with the batch of images {tuple(images.shape)}, "
                    f"got {tuple(targets.shape)}"
                )
            if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= self.num_classes):
                raise ValueError(f"targets must hold labels 0..{self.num_classes - 1}")
            if num_steps is not None and num_steps != targets.shape[1]:
                raise ValueError(f"num_steps={num_steps} does not match targets {tuple(targets.shape)}")
            num_steps = targets.shape[1]
        elif num_steps is None or num_steps < 1:
            raise ValueError(f"without targets, num_steps must be a positive int, got {num_steps!r}")
        if locations is not None:
            if self.kind == "soft":
                raise ValueError("locations can only be given to hard or gumbel attention")
            if tuple(locations.shape) != (batch, num_steps):
                raise ValueError(f"locations must be (batch, steps) = {(batch, num_steps)}, "
                                 f"got {tuple(locations.shape)}")
        sample = self.training if sample is None else bool(sample)
        expected = None
        if self.kind == "hard" and self.expectation_prob > 0 and sample and locations is None:
            expected = torch.rand(batch, device=images.device) < self.expectation_prob
        enc = self.encode(images)
        num_locations = enc.features.shape[1]
        if locations is not None and locations.numel() and not (
            0 <= int(locations.min()) and int(locations.max()) < num_locations
        ):
            raise ValueError(f"locations must lie in 0..{num_locations - 1} (L = {num_locations} for grid {enc.grid})")
        state = self.init_state(enc)
        prev = torch.full((batch,), self.start_id, dtype=torch.long, device=images.device)
        logits, contexts, weights, chosen, log_probs = [], [], [], [], []
        for t in range(num_steps):
            step_logits, state, (context, alpha, s_t, log_p) = self.decode_step(
                prev, state, enc, sample, None if locations is None else locations[:, t], expected
            )
            logits.append(step_logits)
            contexts.append(context)
            weights.append(alpha)
            chosen.append(s_t)
            log_probs.append(log_p)
            prev = targets[:, t] if targets is not None else step_logits.argmax(dim=-1)
        hard_like = self.kind != "soft"
        return ImageAttentionOutput(
            logits=torch.stack(logits, dim=1),
            weights=torch.stack(weights, dim=1),
            context=torch.stack(contexts, dim=1),
            sampled=torch.stack(chosen, dim=1) if hard_like else None,
            log_probs=torch.stack(log_probs, dim=1) if hard_like else None,
            grid=enc.grid,
            expected=expected,
        )

    @torch.no_grad()
    def predict(self, images: torch.Tensor, num_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy labels (batch, steps) and weights (batch, steps, L), eval mode."""
        was_training = self.training
        self.eval()
        try:
            out = self.forward(images, num_steps=num_steps)
        finally:
            self.train(was_training)
        return out.logits.argmax(dim=-1), out.weights


def doubly_stochastic_penalty(weights: torch.Tensor, target: float | str = "uniform") -> torch.Tensor:
    """sum_i (tau - sum_t alpha_ti)^2: (batch, steps, L) -> (batch,).

    Raises ``ValueError`` if ``weights`` is not 3-D or ``target`` is neither a number
    nor "uniform". Source: Xu et al. (2015), section 4.2.1, eq. (14).
    """
    if weights.dim() != 3:
        raise ValueError(f"weights must be (batch, steps, L), got {tuple(weights.shape)}")
    steps, locations = weights.shape[1], weights.shape[2]
    if target == "uniform":
        tau = steps / locations
    elif isinstance(target, (int, float)) and not isinstance(target, bool):
        tau = float(target)
    else:
        raise ValueError(f"target must be a number or 'uniform', got {target!r}")
    coverage = weights.sum(dim=1)  # c_i = sum_t alpha_ti: (batch, L)
    return ((tau - coverage) ** 2).sum(dim=-1)


def _validate_targets(out: ImageAttentionOutput, targets: torch.Tensor) -> None:
    if tuple(targets.shape) != tuple(out.logits.shape[:2]):
        raise ValueError(
            f"targets must be (batch, steps) = {tuple(out.logits.shape[:2])} to fit logits "
            f"{tuple(out.logits.shape)}, got {tuple(targets.shape)}"
        )


def soft_attention_loss(
    out: ImageAttentionOutput, targets: torch.Tensor, doubly_stochastic: float = 0.0,
    coverage_target: float | str = "uniform",
) -> torch.Tensor:
    """Negative log-likelihood plus lambda times the penalty of eq. (14).

    Raises ``ValueError`` if ``targets`` (batch, steps) does not fit or lambda < 0.
    """
    _validate_targets(out, targets)
    if doubly_stochastic < 0:
        raise ValueError(f"doubly_stochastic (lambda) must be >= 0, got {doubly_stochastic}")
    nll = F.cross_entropy(out.logits.flatten(0, 1), targets.flatten())
    if doubly_stochastic == 0:
        return nll
    return nll + doubly_stochastic * doubly_stochastic_penalty(out.weights, coverage_target).mean()


class MovingAverageBaseline:
    """Exponential moving average b of the reward; 0 <= ``decay`` < 1."""

    def __init__(self, decay: float = 0.9, initial: float | None = None) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {decay}")
        self.decay = float(decay)
        self.value: float | None = None if initial is None else float(initial)

    def update(self, reward: torch.Tensor | float) -> float:
        """Fold in one batch's mean reward and return the new b."""
        mean = float(torch.as_tensor(reward, dtype=torch.float64).detach().mean())
        self.value = mean if self.value is None else self.decay * self.value + (1.0 - self.decay) * mean
        return self.value

    def __repr__(self) -> str:
        return f"MovingAverageBaseline(decay={self.decay}, value={self.value})"


@dataclass
class HardAttentionLoss:
    """The parts of :func:`hard_attention_loss`."""

    loss: torch.Tensor
    nll: torch.Tensor
    reward: torch.Tensor
    baseline: float
    advantage: torch.Tensor
    entropy: torch.Tensor


def hard_attention_loss(
    out: ImageAttentionOutput,
    targets: torch.Tensor,
    baseline: MovingAverageBaseline | float = 0.0,
    entropy_weight: float = 0.0,
    reward: str = "log_likelihood",
    reward_weight: float = 1.0,
    update_baseline: bool = True,
) -> HardAttentionLoss:
    """REINFORCE loss for hard attention (Xu et al. 2015, section 4.1, eqs. (10)-(12)).

    Raises ``ValueError`` if ``out`` has no sampled locations, ``targets`` (batch,
    steps) does not fit, ``reward`` is unknown or a weight is negative.
    """
    if out.log_probs is None or out.sampled is None:
        raise ValueError("hard_attention_loss needs the sampled locations of hard attention; "
                         "this output comes from soft attention (use soft_attention_loss)")
    _validate_targets(out, targets)
    if reward not in REWARD_KINDS:
        raise ValueError(f"reward must be one of {REWARD_KINDS}, got {reward!r}")
    if entropy_weight < 0 or reward_weight < 0:
        raise ValueError(f"entropy_weight and reward_weight must be >= 0, got {entropy_weight}, {reward_weight}")
    batch, steps = targets.shape
    log_p_y = -F.cross_entropy(out.logits.flatten(0, 1), targets.flatten(), reduction="none").view(batch, steps)
    nll = -log_p_y.mean()
    if reward == "log_likelihood":
        rewards = log_p_y.sum(dim=1).detach()
    else:
        rewards = (out.logits.argmax(dim=-1) == targets).all(dim=1).to(out.logits.dtype).detach()
    sampled = torch.ones_like(rewards, dtype=torch.bool) if out.expected is None else ~out.expected
    if isinstance(baseline, MovingAverageBaseline):
        first = rewards[sampled].mean() if bool(sampled.any()) else rewards.mean()
        b = float(first) if baseline.value is None else baseline.value
    else:
        b = float(baseline)
    advantage = (rewards - b) * sampled
    log_p_s = out.log_probs.sum(dim=1)  # log p(s | a) = sum_t log alpha_{t, s_t}
    reinforce = -(reward_weight * advantage * log_p_s).mean()
    weights = out.weights
    entropy = -(weights * torch.log(weights.clamp_min(_TINY))).sum(dim=-1).mean()
    loss = nll + reinforce - entropy_weight * entropy
    if isinstance(baseline, MovingAverageBaseline) and update_baseline and bool(sampled.any()):
        baseline.update(rewards[sampled])
    return HardAttentionLoss(loss=loss, nll=nll.detach(), reward=rewards, baseline=b,
                             advantage=advantage, entropy=entropy.detach())
