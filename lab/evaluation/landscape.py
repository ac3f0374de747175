"""The held-out loss of a trained model over a grid of α (claims.toml ``lm-alpha-flat-landscape``,
``[scale] landscape``): is the loss flat in the dilation multiplier, as the paper says to explain
why learned α does not move?

`alpha_landscape(model, tokens, alphas, one_layer)` evaluates the model as trained, then with
every layer's α set to each value of ``alphas``, then with one layer at a time moved to each
value of ``one_layer`` (the others as trained) — evaluation only, the weights untouched and the
trained α restored afterwards.  A fixed-α layer's α is set directly; a learned layer's θ is set
so that 0.5 + sigmoid(θ) is the value (`offsets.theta_from_alpha`).  The sparse plan is
rebuilt from α on every forward, so the offsets change with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from lab.evaluation.evaluate import heldout_perplexity
from lab.ladder import offsets

__all__ = ["LandscapePoint", "alpha_landscape", "alphas_set"]


@dataclass(frozen=True)
class LandscapePoint:
    """One evaluation: which α setting (``"trained"``, ``"all"`` or ``"layer"``), the layer moved
    (None unless ``"layer"``), the α set (None for ``"trained"``), held-out mean NLL (nats)."""

    setting: str
    layer: int | None
    alpha: float | None
    loss: float
    tokens: int


@contextmanager
def alphas_set(model, alphas: Sequence[float]):
    """Every layer's α set to ``alphas`` (one per layer) inside the block, restored after."""
    blocks = list(model.blocks)
    if len(alphas) != len(blocks):
        raise ValueError(f"{len(alphas)} α for a model of {len(blocks)} layers: give one a layer")
    saved = [(b.attn.start_alpha, None if b.attn.theta is None else b.attn.theta.detach().clone())
             for b in blocks]  # fmt: skip
    try:
        with torch.no_grad():
            for b, a in zip(blocks, alphas):
                attn = b.attn
                if attn.theta is None:
                    attn.start_alpha = float(a)
                else:
                    cfg = attn.cfg
                    attn.theta.fill_(
                        offsets.theta_from_alpha(float(a), cfg.alpha_min, cfg.alpha_span)
                    )
        yield model
    finally:
        with torch.no_grad():
            for b, (fixed, theta) in zip(blocks, saved):
                b.attn.start_alpha = fixed
                if theta is not None:
                    b.attn.theta.copy_(theta)


def alpha_landscape(
    model,
    tokens,
    alphas: Sequence[float] = (0.6, 0.8, 1.0, 1.2, 1.4),
    one_layer: Sequence[float] = (0.6, 1.4),
    limit_windows: int | None = None,
    batch_size: int = 8,
) -> list[LandscapePoint]:
    """The model's held-out loss as trained, at every all-layer α of ``alphas``, and with each
    layer alone moved to each value of ``one_layer``; in that order."""
    trained = model.alphas()
    L = len(trained)

    def nll(setting, layer, a, values):
        with alphas_set(model, values):
            p = heldout_perplexity(
                model, tokens, batch_size=batch_size, limit_windows=limit_windows
            )
        return LandscapePoint(setting, layer, a, p.loss, p.tokens)

    model.eval()
    out = [nll("trained", None, None, trained)]
    out += [nll("all", None, float(a), [a] * L) for a in alphas]
    for layer in range(L):
        for a in one_layer:
            values = list(trained)
            values[layer] = a
            out.append(nll("layer", layer, float(a), values))
    return out
