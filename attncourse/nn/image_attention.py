"""Show, attend and tell: a recurrent decoder that attends over an image grid.

Xu et al. (2015) caption an image one word at a time and, before each word,
look at part of the image. A CNN turns the image into a grid of L annotation
vectors a_1..a_L, one per location, each D wide (section 3.1.1). At output step
t the decoder, in state h_{t-1}, scores every location with a small MLP and
turns the scores into weights (eqs. (4)-(5)):

    e_ti = f_att(a_i, h_{t-1}) = v_a^T tanh(W_a h_{t-1} + U_a a_i)
    alpha_ti = exp(e_ti) / sum_k exp(e_tk)

and reads a context vector z_t from the grid. The two attentions of the paper
differ only in *how* z_t is read (eq. (6)):

* **soft** (deterministic, section 4.2): z_t = sum_i alpha_ti a_i, the expected
  annotation; everything is differentiable and trained by backpropagation.
* **hard** (stochastic, section 4.1): one location s_t ~ Multinoulli(alpha_t)
  is *sampled* and z_t = a_{s_t}. Sampling has no gradient, so the attention
  is trained with REINFORCE (eqs. (10)-(12); Williams 1992), see
  :func:`hard_attention_loss`. As in the paper, a share of the images may
  read the expectation instead while training (``expectation_prob``), which
  helps the decoder learn while the sampled locations are still poor.

A third reading, **gumbel**, is not in the paper: the straight-through
Gumbel-softmax estimator (Jang, Gu, Poole 2017; Maddison et al. 2017), the
modern alternative to REINFORCE for a discrete choice. Its forward pass reads
one sampled location like hard attention; its backward pass uses the gradient
of a softened sample, so it trains with the plain likelihood.

Query, keys, values: the **query** is the decoder state h_{t-1}; the **keys**
and the **values** are both the annotation vectors a_i (the keys through U_a).

Then, as in the RNN decoder of :mod:`attncourse.nn.rnn`,

    h_t = GRU([E y_{t-1}; z_t], h_{t-1})
    p(y_t | a, y_<t) = softmax(W_o [h_t; z_t; E y_{t-1}] + b_o)

Differences from the paper, all for a small course task: a 2-block CNN
trained from scratch instead of VGG features; a GRU instead of an LSTM; one
linear output layer on [h_t; z_t; E y_{t-1}] instead of the deep output of
eq. (7) (the same three inputs); no gating scalar beta_t (section 4.2.1); and
two coordinate features appended to every a_i (see :class:`ConvEncoder`).

References
----------
Xu et al. (2015), "Show, Attend and Tell: Neural Image Caption Generation with
Visual Attention", ICML, sections 3.1, 4.1, 4.2, equations (4)-(14).
Bahdanau, Cho, Bengio (2015), section 3.1 (the additive scorer f_att).
Williams (1992), "Simple statistical gradient-following algorithms for
connectionist reinforcement learning" (REINFORCE).
Jang, Gu, Poole (2017), "Categorical Reparameterization with Gumbel-Softmax", ICLR.
Maddison, Mnih, Teh (2017), "The Concrete Distribution: A Continuous Relaxation of
Discrete Random Variables", ICLR.
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

    ``num_blocks`` blocks of [3x3 convolution (padding 1), ReLU, 2x2 max
    pooling]; the grid has ``grid = (height // 2**num_blocks, width // 2**num_blocks)``
    locations, L = grid rows x grid columns, read row by row (location
    ``i = row * grid_width + col``). With the default 2 blocks each location
    covers a 10x10-pixel window with stride 4, so an 8x8 digit spans two or
    three locations.

    With ``coordinates=True`` the last two entries of every a_i are the
    location's column and row, scaled to [-1, 1]. Xu et al. need nothing of
    the kind for captions, but reading digits *left to right* needs to know
    where a location is, and a CNN's features say little about that (only
    its zero padding marks the border). Being part of a_i, the coordinates
    reach both the scorer f_att (so attention can move by position) and the
    context z_t (so the decoder knows where it looked).

    Parameters
    ----------
    in_channels : int
        Image channels (1 for the digit canvases).
    feature_dim : int
        Width D of each annotation vector, coordinates included.
    channels : int
        Channels of the hidden convolution blocks.
    num_blocks : int
        Convolution-pooling blocks; the grid shrinks by 2 per block.
    coordinates : bool
        Append (column, row) in [-1, 1] to every a_i.

    Raises
    ------
    ValueError
        If a size is not positive, or ``feature_dim < 3`` with coordinates.

    References
    ----------
    Xu et al. (2015), section 3.1.1 (annotation vectors from a CNN's lower
    convolutional layer: L = 14 x 14 = 196 locations, D = 512).
    Liu et al. (2018), "An intriguing failing of convolutional neural networks
    and the CoordConv solution" (coordinates as features).
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
        """Raise ``ValueError`` unless ``images`` is (batch, in_channels, height, width) and big enough."""
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
        """Annotation vectors of a batch of images.

        Parameters
        ----------
        images : (batch, in_channels, height, width) float

        Returns
        -------
        features : (batch, L, feature_dim)
            a_1..a_L, locations row by row; with coordinates the last two
            columns are (column, row) in [-1, 1].
        grid : (int, int)
            (grid rows, grid columns), with L = their product.

        Raises
        ------
        ValueError
            If ``images`` does not have ``in_channels`` channels or is smaller
            than ``2**num_blocks`` pixels in height or width; the message names the shape.
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
    """What the decoder reads from the encoder, computed once per batch of images.

    Attributes
    ----------
    features : (batch, L, feature_dim)
        Annotation vectors a_i (keys and values).
    projected_keys : (batch, L, attn_dim)
        U_a a_i, computed once for all steps.
    grid : (int, int)
        (grid rows, grid columns).
    """

    features: torch.Tensor
    projected_keys: torch.Tensor
    grid: tuple[int, int]


@dataclass
class ImageAttentionOutput:
    """Output of :meth:`ImageCaptioner.forward`.

    Attributes
    ----------
    logits : (batch, steps, num_classes)
        Unnormalised scores of y_t.
    weights : (batch, steps, L)
        alpha_ti, the softmax of the scores e_ti over locations; every row sums
        to 1. For hard and Gumbel attention these are the probabilities the
        location was drawn from, not what was read (see :attr:`effective_weights`).
    context : (batch, steps, feature_dim)
        z_t, what the decoder read: sum_i alpha_ti a_i (soft) or a_{s_t} (hard, gumbel).
    sampled : (batch, steps) long or None
        The location s_t read at each step (hard, gumbel); ``None`` for soft attention.
    log_probs : (batch, steps) or None
        log p(s_t | a) = log alpha_{t, s_t}, differentiable with respect to the
        attention's parameters; ``None`` for soft attention.
    grid : (int, int)
        (grid rows, grid columns) of the L locations.
    expected : (batch,) bool or None
        Hard attention with ``expectation_prob > 0``: ``True`` for the images
        that read the expectation z_t = sum_i alpha_ti a_i at every step
        instead of a sampled location (their ``sampled`` entries were drawn
        but not read). ``None`` otherwise.
    """

    logits: torch.Tensor
    weights: torch.Tensor
    context: torch.Tensor
    sampled: torch.Tensor | None
    log_probs: torch.Tensor | None
    grid: tuple[int, int]
    expected: torch.Tensor | None = None

    @property
    def effective_weights(self) -> torch.Tensor:
        """(batch, steps, L): the weights z_t was actually read with, z_t = sum_i w_ti a_i.

        One-hot at s_t for hard and Gumbel attention; alpha itself for soft
        attention and for the images in :attr:`expected`.
        """
        if self.sampled is None:
            return self.weights
        one_hot = F.one_hot(self.sampled, self.weights.shape[-1]).to(self.weights.dtype)
        if self.expected is None:
            return one_hot
        return torch.where(self.expected[:, None, None], self.weights, one_hot)

    def weight_maps(self, effective: bool = False) -> torch.Tensor:
        """Weights as images, shape (batch, steps, grid rows, grid columns), for heatmaps."""
        weights = self.effective_weights if effective else self.weights
        return weights.reshape(*weights.shape[:2], *self.grid)


class ImageCaptioner(nn.Module):
    """CNN encoder + GRU decoder with soft, hard or Gumbel attention over the image grid.

    The decoder emits ``steps`` class labels (e.g. the digits of a canvas, left
    to right). The start symbol y_0 is the extra embedding index ``num_classes``.
    The first state is h_0 = tanh(W_init mean_i a_i) (section 3.1.2 of the
    paper initialises its LSTM from the mean annotation the same way).

    Query: the decoder state h_{t-1}. Keys: U_a a_i. Values: a_i.

    Parameters
    ----------
    num_classes : int
        Number of output labels (10 digits).
    attention : {"soft", "hard", "gumbel"}
        How z_t is read from the weights (see the module docstring).
    feature_dim : int
        Width D of the annotation vectors.
    hidden_dim : int
        Width of the decoder state h_t.
    emb_dim : int
        Width of the label embeddings E y.
    attn_dim : int, optional
        Hidden width of f_att; default ``hidden_dim``.
    channels : int
        Hidden channels of the CNN.
    in_channels : int
        Image channels.
    num_blocks : int
        CNN blocks (each halves the grid).
    coordinates : bool
        Append location coordinates to the annotations (see :class:`ConvEncoder`).
    tau : float
        Temperature of the Gumbel-softmax (``attention="gumbel"`` only).
    expectation_prob : float in [0, 1)
        Hard attention only: while sampling, each image reads the expectation
        sum_i alpha_ti a_i (soft attention) instead of a sampled location with
        this probability, at all its steps. Xu et al. (2015, section 4.1) use
        0.5 to train the decoder on good contexts while the policy is still
        poor; 0 is pure hard attention.

    Attributes
    ----------
    config : dict
        Constructor arguments; ``ImageCaptioner(**model.config)`` rebuilds the architecture.
    encoder : ConvEncoder
    attention : AdditiveAttention
        f_att; ``v_a`` starts at zero, so attention starts uniform.

    Raises
    ------
    ValueError
        If ``attention`` is unknown or a size is not positive.

    References
    ----------
    Xu et al. (2015), sections 3.1 (model) and 4 (soft and hard attention).
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
        """Annotation vectors a_i and their key projections U_a a_i.

        Parameters
        ----------
        images : (batch, in_channels, height, width)

        Returns
        -------
        ImageEncoding

        Raises
        ------
        ValueError
            From :meth:`ConvEncoder.forward` for a wrong channel count or too small an image.
        """
        features, grid = self.encoder(images)
        return ImageEncoding(features=features, projected_keys=self.attention.project_keys(features), grid=grid)

    def init_state(self, enc: ImageEncoding) -> torch.Tensor:
        """h_0 = tanh(W_init mean_i a_i), shape (batch, hidden_dim)."""
        return torch.tanh(self.init_proj(enc.features.mean(dim=1)))

    def scores(self, state: torch.Tensor, enc: ImageEncoding) -> torch.Tensor:
        """e_ti = f_att(a_i, h_{t-1}) = v_a^T tanh(W_a h_{t-1} + U_a a_i) (eq. (4)), shape (batch, L).

        The same scorer as :class:`~attncourse.nn.additive.AdditiveAttention`
        (whose parameters it uses), written out because hard attention needs
        the scores themselves: log alpha = log_softmax(e) stays finite where
        alpha underflows to 0.
        """
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
        """Weights alpha_t and context z_t for one step.

        Parameters
        ----------
        state : (batch, hidden_dim)
            h_{t-1}, the query.
        enc : ImageEncoding
        sample : bool
            Hard / Gumbel attention: draw s_t (``True``) or take the most
            probable location argmax_i alpha_ti (``False``). Ignored for soft attention.
        location : (batch,) long, optional
            Read this location instead of choosing one (hard / Gumbel only),
            e.g. to score given locations.
        use_expectation : (batch,) bool, optional
            Hard attention: these images read sum_i alpha_ti a_i instead (see
            ``expectation_prob``).

        Returns
        -------
        context : (batch, feature_dim)
            z_t.
        weights : (batch, L)
            alpha_t.
        sampled : (batch,) long or None
            s_t (``None`` for soft attention).
        log_prob : (batch,) or None
            log alpha_{t, s_t}.
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
        """One output step: from y_{t-1} and h_{t-1} to the scores of y_t and h_t.

        Parameters
        ----------
        prev_tokens : (batch,) long
            y_{t-1}; ``num_classes`` (the start symbol) at the first step.
        state : (batch, hidden_dim)
            h_{t-1}.
        enc : ImageEncoding
        sample, location, use_expectation
            As in :meth:`attend`.

        Returns
        -------
        logits : (batch, num_classes)
        new_state : (batch, hidden_dim)
        attended : tuple
            ``(context, weights, sampled, log_prob)`` from :meth:`attend`.
        """
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
        """Read a batch of images step by step.

        With ``targets`` (teacher forcing) step t is fed the true y_{t-1};
        without, it is fed its own previous prediction (greedy decoding).

        Parameters
        ----------
        images : (batch, in_channels, height, width)
        targets : (batch, steps) long, optional
            Labels in 0..num_classes-1.
        num_steps : int, optional
            Steps to decode; required without ``targets``, must equal
            ``targets.shape[1]`` with them.
        sample : bool, optional
            Draw the hard / Gumbel locations (``True``) or take argmax
            (``False``); default: draw in training mode, argmax in evaluation mode.
        locations : (batch, steps) long, optional
            Read these locations instead (hard / Gumbel only).

        With ``expectation_prob > 0`` and sampling, a random share of the
        images reads the expectation instead (``out.expected``).

        Returns
        -------
        ImageAttentionOutput
            ``logits (batch, steps, num_classes)``, ``weights (batch, steps, L)``,
            ``context (batch, steps, feature_dim)``, ``sampled`` and ``log_probs``
            ``(batch, steps)`` (``None`` for soft attention).

        Raises
        ------
        ValueError
            For images of the wrong shape, targets that do not fit the batch or
            hold labels out of range, a missing or inconsistent ``num_steps``,
            or ``locations`` with soft attention or of the wrong shape.
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
        """Greedy labels and attention weights, in evaluation mode (argmax locations).

        Parameters
        ----------
        images : (batch, in_channels, height, width)
        num_steps : int

        Returns
        -------
        predictions : (batch, num_steps) long
        weights : (batch, num_steps, L)
            alpha_t (for hard / Gumbel attention the location read is their argmax).
        """
        was_training = self.training
        self.eval()
        try:
            out = self.forward(images, num_steps=num_steps)
        finally:
            self.train(was_training)
        return out.logits.argmax(dim=-1), out.weights


def doubly_stochastic_penalty(weights: torch.Tensor, target: float | str = "uniform") -> torch.Tensor:
    """sum_i (tau - sum_t alpha_ti)^2 for each image: how unevenly attention covered the grid.

    The weights are *stochastic* over locations at every step (sum_i alpha_ti = 1);
    the penalty pushes them towards being stochastic over steps as well, each
    location receiving a total attention of tau across the steps ("doubly
    stochastic", Xu et al. 2015, section 4.2.1, eq. (14), with tau = 1).

    With T steps and L locations the totals c_i = sum_t alpha_ti always add up
    to T, so tau = 1 is reachable only if T = L; with T << L (3 digits, 48
    locations) the paper's penalty cannot reach 0. It still does its job:
    expanding, sum_i (tau - c_i)^2 = L tau^2 - 2 tau T + sum_i c_i^2, and the
    first two terms are constants, so *every* tau gives the scores e_ti (and
    everything behind them) the same gradient, the gradient of sum_i c_i^2,
    which discourages attending to the same locations at several steps. We therefore default to ``target="uniform"``,
    tau = T / L, the only value whose minimum (total attention spread evenly
    over the locations) is 0, so that a printed loss means something; it
    differs from the paper's value (``target=1.0``) by the constant
    L (1 - T/L)^2 and trains identically. With T = L the two coincide.

    Parameters
    ----------
    weights : (batch, steps, L)
        alpha_ti.
    target : float or "uniform"
        tau: ``"uniform"`` for T / L (default), 1.0 for the paper's.

    Returns
    -------
    (batch,)
        The penalty of each image (not yet multiplied by lambda).

    Raises
    ------
    ValueError
        If ``weights`` is not 3-D or ``target`` is neither a number nor "uniform".

    References
    ----------
    Xu et al. (2015), section 4.2.1, equation (14).
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
    """Negative log-likelihood plus the doubly stochastic penalty (soft or Gumbel attention).

    loss = -(1 / (B T)) sum_b sum_t log p(y_t | a, y_<t)
           + lambda (1 / B) sum_b sum_i (tau - sum_t alpha_ti)^2

    The paper sums the log-likelihood over the words of a caption (eq. (14));
    we average it over labels so that the loss does not scale with the
    number of steps, so lambda here is relative to one label's NLL.

    Parameters
    ----------
    out : ImageAttentionOutput
        From teacher forcing with ``targets``.
    targets : (batch, steps) long
    doubly_stochastic : float
        lambda, the weight of the penalty (0 turns it off; Xu et al. use 1).
    coverage_target : float or "uniform"
        tau, see :func:`doubly_stochastic_penalty`: T / L by default, 1.0 for
        the paper's form; the gradient is the same for every tau.

    Returns
    -------
    Tensor, scalar

    Raises
    ------
    ValueError
        If ``targets`` does not fit ``out.logits`` or lambda is negative.

    References
    ----------
    Xu et al. (2015), section 4.2.1, equation (14).
    """
    _validate_targets(out, targets)
    if doubly_stochastic < 0:
        raise ValueError(f"doubly_stochastic (lambda) must be >= 0, got {doubly_stochastic}")
    nll = F.cross_entropy(out.logits.flatten(0, 1), targets.flatten())
    if doubly_stochastic == 0:
        return nll
    return nll + doubly_stochastic * doubly_stochastic_penalty(out.weights, coverage_target).mean()


class MovingAverageBaseline:
    """Exponential moving average of the reward, the REINFORCE baseline b.

    After each batch, b_k = decay * b_{k-1} + (1 - decay) * mean(reward_k)
    (Xu et al. 2015, section 4.1, with decay 0.9). The first update sets b to
    the first batch's mean reward. The value is a plain float: it never
    carries a gradient.

    Parameters
    ----------
    decay : float in [0, 1)
    initial : float, optional
        Starting value; ``None`` means "not yet known".

    Raises
    ------
    ValueError
        If ``decay`` is not in [0, 1).
    """

    def __init__(self, decay: float = 0.9, initial: float | None = None) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {decay}")
        self.decay = float(decay)
        self.value: float | None = None if initial is None else float(initial)

    def update(self, reward: torch.Tensor | float) -> float:
        """Fold in one batch's rewards (their mean) and return the new b."""
        mean = float(torch.as_tensor(reward, dtype=torch.float64).detach().mean())
        self.value = mean if self.value is None else self.decay * self.value + (1.0 - self.decay) * mean
        return self.value

    def __repr__(self) -> str:
        return f"MovingAverageBaseline(decay={self.decay}, value={self.value})"


@dataclass
class HardAttentionLoss:
    """The parts of :func:`hard_attention_loss`.

    Attributes
    ----------
    loss : scalar Tensor
        What to call ``backward()`` on.
    nll : scalar Tensor
        Mean negative log-likelihood per label.
    reward : (batch,) Tensor
        R, detached.
    baseline : float
        b used for this batch (before any update).
    advantage : (batch,) Tensor
        R - b, detached (0 for the images in ``out.expected``).
    entropy : scalar Tensor
        Mean entropy H(alpha_t) over images and steps, in nats.
    """

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

    With locations s = (s_1..s_T) drawn from alpha, reward R and baseline b:

        loss = NLL - lambda_r (R - b) sum_t log p(s_t | a) - lambda_e H(alpha)

    * NLL = -(1 / (B T)) sum log p(y_t | s, a): trains the encoder and the
      decoder through the locations that were read.
    * The REINFORCE term: (R - b) is a constant (detached), so the gradient
      of -(R - b) log p(s) is -(R - b) times the score function
      d log p(s) / dW. **Sign convention**: gradient *descent* on this loss
      moves W along +(R - b) d log p(s) / dW, so it *raises* the probability
      of the sampled locations when their reward beats the baseline
      (R > b) and lowers it when it falls short (R < b). Averaged over
      samples this follows the gradient of the expected reward (eq. (11));
      the baseline leaves that mean unchanged and shrinks its variance.
    * The entropy bonus -lambda_e H(alpha), H = -sum_i alpha_ti log alpha_ti,
      keeps the attention from collapsing onto one location too early (eq. (12)).

    Images that read the expectation instead of samples (``out.expected``,
    see ``ImageCaptioner(expectation_prob=...)``) get no REINFORCE term
    (the NLL trains their attention directly) and are left out of the
    baseline, whose rewards they would inflate.

    Rewards (``reward=``), one per image, shared by all its steps:

    * ``"log_likelihood"`` (the paper's): R = log p(y | s, a) = sum_t log p(y_t | ...),
      the log-probability of the whole target given the locations read.
    * ``"correct"``: R = 1 if every label is predicted right (argmax), else 0;
      bounded and easy to read, but coarser.

    Parameters
    ----------
    out : ImageAttentionOutput
        From a hard-attention model run with sampling, with teacher forcing.
    targets : (batch, steps) long
    baseline : MovingAverageBaseline or float
        b. A :class:`MovingAverageBaseline` without a value yet uses this
        batch's mean reward, then (``update_baseline=True``) folds the batch's
        rewards in, outside the gradient.
    entropy_weight : float
        lambda_e.
    reward : {"log_likelihood", "correct"}
    reward_weight : float
        lambda_r.
    update_baseline : bool
        Update a :class:`MovingAverageBaseline` with this batch's rewards
        after using its old value.

    Returns
    -------
    HardAttentionLoss
        ``loss`` (scalar to backpropagate) and its parts.

    Raises
    ------
    ValueError
        If ``out`` has no sampled locations (soft attention), ``targets`` does
        not fit, ``reward`` is unknown, or a weight is negative.

    References
    ----------
    Xu et al. (2015), section 4.1, equations (10)-(12); Williams (1992).
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
