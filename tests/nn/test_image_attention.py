"""Show, attend and tell: soft, hard and Gumbel attention over an image grid, and their losses."""

import math

import pytest
import torch

from attncourse.nn.image_attention import (
    ConvEncoder,
    ImageAttentionOutput,
    ImageCaptioner,
    MovingAverageBaseline,
    doubly_stochastic_penalty,
    hard_attention_loss,
    soft_attention_loss,
)

SMALL = {"feature_dim": 10, "hidden_dim": 16, "emb_dim": 8, "channels": 8}


def _model(kind="soft", seed=0, **kwargs):
    torch.manual_seed(seed)
    model = ImageCaptioner(attention=kind, **{**SMALL, **kwargs})
    # v_a starts at zero (uniform attention); give it values so weights differ between locations.
    with torch.no_grad():
        model.attention.v_a.normal_(0.0, 1.0)
    return model


def _batch(batch=4, steps=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, 1, 16, 48, generator=g), torch.randint(0, 10, (batch, steps), generator=g)


@pytest.mark.parametrize("kind", ["soft", "hard", "gumbel"])
def test_shapes(kind):
    images, targets = _batch()
    out = _model(kind)(images, targets)
    assert out.grid == (4, 12)
    assert out.logits.shape == (4, 3, 10)
    assert out.weights.shape == out.effective_weights.shape == (4, 3, 48)
    assert out.context.shape == (4, 3, 10)
    assert out.weight_maps().shape == (4, 3, 4, 12)
    if kind == "soft":
        assert out.sampled is None and out.log_probs is None
    else:
        assert out.sampled.shape == out.log_probs.shape == (4, 3)


def test_encoder_grid_and_coordinates():
    encoder = ConvEncoder(feature_dim=6, channels=4)
    features, grid = encoder(torch.rand(2, 1, 16, 48))
    assert features.shape == (2, 48, 6) and grid == (4, 12)
    coords = features[0, :, -2:].reshape(4, 12, 2)
    assert torch.allclose(coords[0, :, 0], torch.linspace(-1, 1, 12))  # column coordinate
    assert torch.allclose(coords[:, 0, 1], torch.linspace(-1, 1, 4))  # row coordinate


def test_soft_weights_sum_to_one_and_context_is_their_average():
    images, targets = _batch()
    model = _model("soft")
    out = model(images, targets)
    assert torch.allclose(out.weights.sum(-1), torch.ones(4, 3), atol=1e-6)
    features = model.encode(images).features
    assert torch.allclose(out.context, out.weights @ features, atol=1e-6)


def test_scores_match_additive_attention_module():
    images, _ = _batch()
    model = _model("soft")
    enc = model.encode(images)
    state = torch.randn(4, 16)
    context, weights, _, _ = model.attend(state, enc, sample=False)
    ref_context, ref_weights = model.attention(state, enc.features, None)
    assert torch.allclose(weights, ref_weights, atol=1e-6)
    assert torch.allclose(context, ref_context, atol=1e-6)


def test_hard_training_reads_one_sampled_location():
    images, targets = _batch()
    model = _model("hard").train()
    out = model(images, targets)
    eff = out.effective_weights
    assert torch.equal(eff.sum(-1), torch.ones(4, 3)) and set(eff.unique().tolist()) <= {0.0, 1.0}
    features = model.encode(images).features
    picked = features[torch.arange(4)[:, None], out.sampled]  # a_{s_t}: (batch, steps, D)
    assert torch.equal(out.context, picked)
    assert torch.allclose(out.log_probs, out.weights.gather(2, out.sampled[..., None]).squeeze(-1).log(), atol=1e-5)


def test_hard_samples_follow_alpha_and_eval_takes_argmax():
    images, targets = _batch(batch=1)
    model = _model("hard")
    with torch.no_grad():
        model.eval()
        out = model(images, targets)
        assert torch.equal(out.sampled, out.weights.argmax(-1))
        enc = model.encode(images.expand(2000, -1, -1, -1))
        torch.manual_seed(1)
        _, weights, draws, _ = model.attend(model.init_state(enc), enc, sample=True)
    frequencies = torch.bincount(draws, minlength=48).float() / 2000
    assert (frequencies - weights[0]).abs().max() < 0.05
    assert torch.allclose(weights[0], out.weights[0, 0], atol=1e-6)


def test_given_locations_are_read():
    images, targets = _batch()
    model = _model("hard")
    locations = torch.tensor([[0, 1, 2], [47, 5, 5], [3, 3, 3], [10, 20, 30]])
    out = model(images, targets, locations=locations)
    assert torch.equal(out.sampled, locations)


def _log_p_of(model, images, targets, locations):
    with torch.no_grad():
        return float(model(images, targets, locations=locations).log_probs.sum())


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_reinforce_step_moves_log_prob_of_sampled_locations_with_the_advantage(sign):
    images, targets = _batch(batch=1)
    model = _model("hard").train()
    torch.manual_seed(0)
    out = model(images, targets)
    locations = out.sampled.detach()
    reward = float(-torch.nn.functional.cross_entropy(out.logits[0].detach(), targets[0], reduction="sum"))
    before = float(_log_p_of(model, images, targets, locations))
    parts = hard_attention_loss(out, targets, baseline=reward - sign * 5.0)  # advantage = +5 or -5
    assert float(parts.advantage) == pytest.approx(sign * 5.0, abs=1e-4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    optimizer.zero_grad()
    parts.loss.backward()
    optimizer.step()
    after = float(_log_p_of(model, images, targets, locations))
    assert (after - before) * sign > 0


def test_reinforce_gradient_on_attention_is_minus_advantage_times_score():
    images, targets = _batch(batch=3)
    model = _model("hard").train()
    torch.manual_seed(0)
    out = model(images, targets)
    parts = hard_attention_loss(out, targets, baseline=-2.0, reward_weight=0.5)
    grad = torch.autograd.grad(parts.loss, model.attention.v_a, retain_graph=True)[0]
    # The NLL does not reach f_att through a sampled location, so only REINFORCE moves v_a.
    expected = torch.autograd.grad(-(0.5 * parts.advantage * out.log_probs.sum(1)).mean(), model.attention.v_a)[0]
    assert torch.allclose(grad, expected, atol=1e-6)
    assert parts.reward.shape == (3,) and not parts.reward.requires_grad


def test_entropy_and_correct_reward():
    images, targets = _batch()
    out = _model("hard").train()(images, targets)
    parts = hard_attention_loss(out, targets, entropy_weight=0.1, reward="correct")
    w = out.weights.detach()
    assert float(parts.entropy) == pytest.approx(float(-(w * w.log()).sum(-1).mean()), rel=1e-5)
    correct = (out.logits.argmax(-1) == targets).all(1).float()
    assert torch.equal(parts.reward, correct)


def test_moving_average_baseline_arithmetic():
    b = MovingAverageBaseline(decay=0.9)
    assert b.value is None
    assert b.update(torch.tensor([1.0, 3.0])) == pytest.approx(2.0)
    assert b.update(torch.tensor([4.0])) == pytest.approx(0.9 * 2.0 + 0.1 * 4.0)
    with pytest.raises(ValueError, match="decay"):
        MovingAverageBaseline(decay=1.0)


def test_loss_uses_old_baseline_then_updates_it():
    images, targets = _batch()
    out = _model("hard").train()(images, targets)
    b = MovingAverageBaseline(decay=0.5, initial=-1.0)
    parts = hard_attention_loss(out, targets, b)
    assert parts.baseline == -1.0
    assert torch.allclose(parts.advantage, parts.reward + 1.0)
    assert b.value == pytest.approx(0.5 * -1.0 + 0.5 * float(parts.reward.mean()))


def test_expectation_prob_reads_the_average_and_skips_reinforce():
    images, targets = _batch(batch=8)
    torch.manual_seed(3)
    model = _model("hard", expectation_prob=0.5).train()
    out = model(images, targets)
    assert out.expected is not None and 0 < int(out.expected.sum()) < 8
    features = model.encode(images).features
    soft = out.weights @ features
    e = out.expected
    assert torch.allclose(out.context[e], soft[e], atol=1e-6)
    assert torch.allclose(out.effective_weights[e], out.weights[e])
    parts = hard_attention_loss(out, targets, baseline=0.0)
    assert torch.equal(parts.advantage[e], torch.zeros(int(e.sum())))


def test_doubly_stochastic_penalty_by_hand():
    weights = torch.tensor([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]])  # T = 2 steps, L = 3 locations
    # coverage sum_t alpha_ti = (1.5, 0.5, 0)
    assert float(doubly_stochastic_penalty(weights, 1.0)) == pytest.approx(0.25 + 0.25 + 1.0)
    tau = 2 / 3
    uniform = (tau - 1.5) ** 2 + (tau - 0.5) ** 2 + tau**2
    assert float(doubly_stochastic_penalty(weights)) == pytest.approx(uniform)
    assert float(doubly_stochastic_penalty(torch.full((1, 2, 3), 1 / 3))) == pytest.approx(0.0, abs=1e-6)
    # The two forms differ by L (1 - T/L)^2 and give the scores e_ti the same gradient.
    assert 1.5 - uniform == pytest.approx(3 * (1 - 2 / 3) ** 2)
    scores = torch.randn(2, 3, 5, requires_grad=True)
    g_paper = torch.autograd.grad(doubly_stochastic_penalty(torch.softmax(scores, -1), 1.0).sum(), scores)[0]
    g_uniform = torch.autograd.grad(doubly_stochastic_penalty(torch.softmax(scores, -1)).sum(), scores)[0]
    assert torch.allclose(g_paper, g_uniform, atol=1e-6)


def test_soft_loss_is_nll_plus_lambda_penalty():
    images, targets = _batch()
    out = _model("soft")(images, targets)
    nll = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 10), targets.reshape(-1))
    assert torch.allclose(soft_attention_loss(out, targets), nll)
    expected = nll + 0.3 * doubly_stochastic_penalty(out.weights).mean()
    assert torch.allclose(soft_attention_loss(out, targets, doubly_stochastic=0.3), expected)


def test_gumbel_reads_one_location_and_passes_gradient_to_attention():
    images, targets = _batch()
    model = _model("gumbel", tau=0.5).train()
    out = model(images, targets)
    features = model.encode(images).features
    assert torch.allclose(out.context, features[torch.arange(4)[:, None], out.sampled], atol=1e-5)
    soft_attention_loss(out, targets).backward()
    assert model.attention.v_a.grad.abs().sum() > 0


def test_greedy_decoding_equals_teacher_forcing_on_its_own_predictions():
    images, _ = _batch()
    for kind in ("soft", "hard"):
        model = _model(kind).eval()
        predictions, weights = model.predict(images, num_steps=3)
        with torch.no_grad():
            forced = model(images, predictions)
        assert torch.equal(forced.logits.argmax(-1), predictions)
        assert torch.allclose(forced.weights, weights, atol=1e-6)
        assert model.training is False


def test_bad_inputs_raise_value_errors_naming_shapes():
    model = _model("soft")
    with pytest.raises(ValueError, match=r"channels=1.*\(2, 3, 16, 48\)"):
        model(torch.rand(2, 3, 16, 48), num_steps=3)
    with pytest.raises(ValueError, match=r"\(2, 1, 3, 48\) are too small"):
        model(torch.rand(2, 1, 3, 48), num_steps=3)
    with pytest.raises(ValueError, match=r"targets.*\(3, 3\)"):
        model(torch.rand(2, 1, 16, 48), torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="labels 0..9"):
        model(torch.rand(2, 1, 16, 48), torch.full((2, 3), 10))
    with pytest.raises(ValueError, match="num_steps"):
        model(torch.rand(2, 1, 16, 48))
    with pytest.raises(ValueError, match="locations"):
        model(torch.rand(2, 1, 16, 48), num_steps=1, locations=torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="attention must be"):
        ImageCaptioner(attention="glimpse")
    with pytest.raises(ValueError, match="expectation_prob"):
        ImageCaptioner(attention="soft", expectation_prob=0.5)
    images, targets = _batch()
    out = model(images, targets)
    with pytest.raises(ValueError, match="soft attention"):
        hard_attention_loss(out, targets)
    with pytest.raises(ValueError, match=r"\(4, 3\)"):
        soft_attention_loss(out, targets[:, :2])
    with pytest.raises(ValueError, match="locations must lie"):
        _model("hard")(images, targets, locations=torch.full((4, 3), 48))


def test_soft_attention_training_loss_decreases():
    from attncourse.data.canvases import digit_canvas_task

    torch.manual_seed(0)
    images, targets = digit_canvas_task(16, 0, 0, seed=0).train.tensors()
    model = ImageCaptioner(attention="soft", **SMALL)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        loss = soft_attention_loss(model(images, targets), targets, doubly_stochastic=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.3
    assert not any(math.isnan(x) for x in losses)


def test_output_dataclass_is_exported_type():
    images, targets = _batch()
    assert isinstance(_model("soft")(images, targets), ImageAttentionOutput)
