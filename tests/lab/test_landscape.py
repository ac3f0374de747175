"""The α landscape (lab.evaluation.landscape): each point is the loss of the same weights built
with that α from scratch (the oracle: a second model, its schedule the point's α, loaded with
the first's state), the trained α comes back after every point, and a learned layer's θ is set
so that 0.5 + sigmoid(θ) is the point's α."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lab.evaluation.evaluate import heldout_perplexity
from lab.evaluation.landscape import alpha_landscape, alphas_set
from lab.lm.model import build_model


def tokens(n=4 * 64 + 1, vocab=256, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, n)


def same_weights_at(model, alphas, **kw):
    """A model built with ``alphas`` as its fixed schedule, holding ``model``'s weights."""
    other = build_model("tiny", schedule=tuple(alphas), rungs=10, **kw).eval()
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("theta")}
    other.load_state_dict(state, strict=True)
    return other


def test_each_point_is_the_loss_of_the_weights_built_at_that_alpha():
    torch.manual_seed(0)
    model = build_model("tiny", schedule="stagger", rungs=10).eval()
    toks = tokens(vocab=model.cfg.vocab_size)
    trained = model.alphas()
    pts = alpha_landscape(model, toks, alphas=(0.6, 1.4), one_layer=(0.7,))
    L = len(trained)
    assert [p.setting for p in pts] == ["trained", "all", "all"] + ["layer"] * L
    want = {("trained", None, None): trained, ("all", None, 0.6): [0.6] * L,
            ("all", None, 1.4): [1.4] * L}  # fmt: skip
    for layer in range(L):
        values = list(trained)
        values[layer] = 0.7
        want[("layer", layer, 0.7)] = values
    for p in pts:
        ref = heldout_perplexity(same_weights_at(model, want[(p.setting, p.layer, p.alpha)]), toks)
        assert p.loss == pytest.approx(ref.loss, rel=1e-6) and p.tokens == ref.tokens
    assert pts[1].loss != pytest.approx(pts[0].loss)  # α matters: the offsets moved
    assert model.alphas() == trained  # restored


def test_a_learned_layers_theta_is_set_and_restored():
    torch.manual_seed(1)
    model = build_model("tiny", schedule="learned", learned_init=(1.45, 1.1), rungs=10).eval()
    thetas = [b.attn.theta.detach().clone() for b in model.blocks]
    L = len(thetas)
    with alphas_set(model, [0.8] * L):
        assert model.alphas() == pytest.approx([0.8] * L)
    assert all(torch.equal(b.attn.theta, t) for b, t in zip(model.blocks, thetas))
    with pytest.raises(ValueError, match="one a layer"):
        with alphas_set(model, [1.0]):
            pass
    with pytest.raises(RuntimeError):  # an error inside still restores
        with alphas_set(model, [0.9] * L):
            raise RuntimeError
    assert all(torch.equal(b.attn.theta, t) for b, t in zip(model.blocks, thetas))
