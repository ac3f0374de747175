"""Language-model evaluations: held-out perplexity, length extrapolation (under both rung
policies, with position-matched blocks) and position-resolved loss — all three built on one
measurement, `position_nll`, so that they agree by construction.  The window rule, the blocks
that remove the long-window confound and the bin edges are specified in docs/evaluation.md;
running them on a run folder and logging them to the store is `lab.evaluation.evalrun`.
One module past 450 lines on purpose: the three evaluations share `position_nll` and its
window rule, and a reader checks them against each other in one place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from lab.data.windows import n_windows, window_starts
from lab.lm.model import FibLM
from lab.lm.modelconfig import RUNG_POLICIES
from lab.machine.precision import autocast
from lab.store.evalkind import EvalKind
from lab.util.checks import positive_int

N_BINS = 8
POSITION_BIN_EDGES: tuple[int, ...] = (0, 127, 255, 383, 511, 639, 767, 895, 1023)  # T = 1024
DEFAULT_FACTORS = (1, 2, 4, 8)


# --------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Perplexity:
    """Mean NLL per scored token (nats) over `tokens` scored targets; ppl = exp(loss)."""

    loss: float
    tokens: int

    @property
    def ppl(self) -> float:
        try:
            return math.exp(self.loss)
        except OverflowError:
            return math.inf

    def to_dict(self) -> dict:
        return {"loss": self.loss, "tokens": self.tokens, "ppl": self.ppl}


@dataclass(frozen=True)
class PositionNLL:
    """Per-position NLL summed over `windows` windows of length `seq_len`.

    sums[i] (float64) is the summed cross-entropy of predicting token i+1 of each window (x[i+1]
    for i < L−1, the token after the window for i = L−1) from tokens 0…i."""

    sums: np.ndarray  # (L,) float64
    windows: int
    window_sums: np.ndarray | None = field(default=None, repr=False)  # (windows,) float64

    def windows_mean(self, index) -> Perplexity:
        """Mean NLL per token over the windows `index` (needs `window_sums`)."""
        if self.window_sums is None:
            raise ValueError("this measurement kept no per-window sums (per_window=False)")
        idx = np.asarray(index, dtype=np.int64)
        n = len(idx) * self.seq_len
        return Perplexity(float(self.window_sums[idx].sum() / n), n)

    @property
    def seq_len(self) -> int:
        return len(self.sums)

    @property
    def mean(self) -> np.ndarray:
        """Per-position mean NLL over the windows, (L,)."""
        return self.sums / self.windows

    def span(self, start: int, stop: int) -> Perplexity:
        """Mean NLL of positions [start, stop) over every window."""
        if not 0 <= start < stop <= self.seq_len:
            raise ValueError(f"span [{start}, {stop}) must lie inside [0, {self.seq_len})")
        n = self.windows * (stop - start)
        return Perplexity(float(self.sums[start:stop].sum() / n), n)

    def whole(self) -> Perplexity:
        return self.span(0, self.seq_len)

    def blocks(self, block_len: int) -> list[Perplexity]:
        """Position-matched blocks: block j = positions [j·block_len, (j+1)·block_len)."""
        if block_len < 1 or self.seq_len % block_len:
            raise ValueError(f"block_len={block_len} must divide the window length {self.seq_len}")
        return [self.span(a, a + block_len) for a in range(0, self.seq_len, block_len)]


@dataclass(frozen=True)
class PositionBins:
    """Position-binned NLL of training-length windows (see the module doc for the edges)."""

    seq_len: int
    edges: tuple[int, ...]  # (9,)
    loss: tuple[float, ...]  # (8,) mean NLL per bin
    tokens: tuple[int, ...]  # (8,) tokens scored in each bin
    windows: int

    def to_dict(self) -> dict:
        return {
            "seq_len": self.seq_len,
            "edges": list(self.edges),
            "loss": list(self.loss),
            "tokens": list(self.tokens),
            "windows": self.windows,
        }


@dataclass
class ExtrapolationCell:
    """One (factor, policy) cell; `skipped` holds the reason when it was not evaluated."""

    factor: int
    policy: str
    context_len: int
    whole: Perplexity | None = None
    blocks: list[Perplexity] = field(default_factory=list)  # block j, positions [jT, (j+1)T)
    # the same tokens as block j, scored in training-length windows (windows k·m + j at 1×): the
    # only difference from block j is the jT tokens of extra context (no sampling difference)
    same_tokens: list[Perplexity] = field(default_factory=list)
    windows: int = 0
    new_rungs: list[list[int]] | None = None  # per layer: distances attended at L, not at T
    skipped: str | None = None
    positions: PositionNLL | None = field(default=None, repr=False)

    @property
    def kind(self) -> str:
        """The store's kind of the whole windows (``recompute`` | ``freeze``: the rung policy)."""
        return str(EvalKind.of_policy(self.policy))

    def to_dict(self) -> dict:
        return {
            "factor": self.factor,
            "policy": self.policy,
            "kind": self.kind,
            "context_len": self.context_len,
            "windows": self.windows,
            **(self.whole.to_dict() if self.whole else {"loss": None, "tokens": 0, "ppl": None}),
            "blocks": [b.to_dict() for b in self.blocks],
            "same_tokens": [b.to_dict() for b in self.same_tokens],
            "new_rungs": self.new_rungs,
            "skipped": self.skipped,
        }


@dataclass
class ExtrapolationResult:
    """All cells of one dataset; `train_len` is the training length T."""

    dataset: str
    train_len: int
    tokens_available: int
    cells: list[ExtrapolationCell]

    def cell(self, factor: int, policy: str = "recompute") -> ExtrapolationCell:
        for c in self.cells:
            if c.factor == factor and c.policy == policy:
                return c
        raise KeyError(f"no cell for factor {factor}, policy {policy!r}")

    def to_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "train_len": self.train_len,
            "tokens_available": self.tokens_available,
            "cells": [c.to_dict() for c in self.cells],
        }


# --------------------------------------------------------------------------------------------
# windows and the per-position measurement
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def position_nll(
    model: torch.nn.Module,
    tokens,
    seq_len: int | None = None,
    batch_size: int = 8,
    limit_windows: int | None = None,
    device=None,
    per_window: bool = False,
) -> PositionNLL:
    """Summed per-position cross-entropy of `model` over the non-overlapping windows of `tokens`.

    model: returns logits (B, L, V) (or a tuple whose first item is them) for ids (B, L) and
    must already sit on `device` (default: the device of its parameters, else CPU).
    tokens: a 1-D integer array (numpy / memmap / tensor).  seq_len defaults to model.cfg.seq_len.
    Raises ValueError when not one complete window fits."""
    tokens = _as_token_array(tokens)
    L = positive_int(seq_len if seq_len is not None else _model_seq_len(model), "seq_len")
    positive_int(batch_size, "batch_size")
    if limit_windows is not None:
        positive_int(limit_windows, "limit_windows")
    count = n_windows(len(tokens), L, limit_windows)
    if count == 0:
        raise ValueError(
            f"no complete window: {len(tokens)} held-out tokens, a window of "
            f"{L} needs {L + 1}; use a shorter seq_len or more held-out tokens"
        )
    device = torch.device(device) if device is not None else _model_device(model)
    was_training = model.training
    model.eval()
    sums = torch.zeros(L, dtype=torch.float64)
    per = np.zeros(count, dtype=np.float64) if per_window else None
    offs = np.arange(L + 1)
    try:
        for starts in window_starts(len(tokens), L, batch_size, limit_windows):  # (B,)
            buf = torch.from_numpy(np.asarray(tokens[starts[:, None] + offs], dtype=np.int64))
            x, y = buf[:, :-1].to(device), buf[:, 1:].to(device)  # (B, L) each
            with autocast(device):
                out = model(x)
            logits = out[0] if isinstance(out, (tuple, list)) else out  # (B, L, V)
            if logits.shape[:2] != x.shape:
                raise ValueError(
                    f"model returned logits of shape {tuple(logits.shape)} for ids "
                    f"{tuple(x.shape)}; expected (batch, time, vocab)"
                )
            nll = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none"
            ).view(y.shape)  # (B, L)
            sums += nll.double().sum(0).cpu()
            if per is not None:
                per[starts // L] = nll.double().sum(1).cpu().numpy()
    finally:
        model.train(was_training)
    return PositionNLL(sums.numpy(), count, per)


def heldout_perplexity(
    model: torch.nn.Module,
    tokens,
    seq_len: int | None = None,
    batch_size: int = 8,
    limit_windows: int | None = None,
    device=None,
) -> Perplexity:
    """Perplexity over the complete non-overlapping windows of `tokens` (tail dropped);
    tokens = windows × seq_len exactly."""
    return position_nll(model, tokens, seq_len, batch_size, limit_windows, device).whole()


def heldout_splits(data, name: str = "val", split: str = "val") -> dict[str, np.ndarray]:
    """{dataset name: token array}: one per domain of a Mixture, else one called `name`."""
    if hasattr(data, "domains"):
        return {n: data.domains[n].tokens(split) for n in data.names}
    return {name: data.tokens(split)}


def domain_perplexities(
    model: torch.nn.Module, data, name: str = "val", split: str = "val", **kwargs
) -> dict[str, Perplexity]:
    """Held-out perplexity per domain of a Mixture (or of the one PreparedData, as `name`);
    kwargs go to `heldout_perplexity`."""
    return {
        n: heldout_perplexity(model, toks, **kwargs)
        for n, toks in heldout_splits(data, name, split).items()
    }


# --------------------------------------------------------------------------------------------
# length extrapolation
# --------------------------------------------------------------------------------------------
def train_len(model: FibLM) -> int:
    """The length the model was trained at (its rung set's training length)."""
    return model.cfg.train_seq_len or model.cfg.seq_len


def attended_columns(model: FibLM) -> list[list[int]] | None:
    """Per layer, the sorted distances a full-length window's queries read at the model's own
    seq_len and rung policy: each layer's `ColumnPlan` (`FibLM.plans`) — the integer set for
    the shift / mask paths, the window plus each kept rung's floor(α·f) for interpolated layers
    (learned α at its current value).  None for a dense model (every distance is attended)."""
    plans = model.plans()
    return None if plans is None else [p.distances for p in plans]


def new_rungs(trained: FibLM, rebuilt: FibLM) -> list[list[int]] | None:
    """Per layer, the distances `rebuilt` attends that `trained` (at its training length) does
    not: the never-trained rungs a longer rebuild adds.  None for a dense model."""
    base = attended_columns(
        trained
        if trained.cfg.seq_len == train_len(trained)
        else trained.with_seq_len(train_len(trained), "freeze")
    )
    long = attended_columns(rebuilt)
    if base is None or long is None:
        return None
    return [sorted(set(b) - set(a)) for a, b in zip(base, long)]


def length_extrapolation(
    model: FibLM,
    tokens,
    factors: Sequence[int] = DEFAULT_FACTORS,
    policies: Sequence[str] = RUNG_POLICIES,
    batch_size: int = 8,
    limit_windows: int | None = None,
    device=None,
    dataset: str = "val",
) -> ExtrapolationResult:
    """Evaluate `model` rebuilt at factor × its training length under each rung policy.

    batch_size and limit_windows are in training-length windows: factor m runs
    max(1, batch_size // m) windows a batch and max(1, limit_windows // m) windows in all.
    A factor whose window needs more than the held-out tokens is skipped with a reason; at
    factor 1 both policies are the same model and share one measurement. A factor or policy
    named twice is measured once (`--factors 1 1` asks for one cell, not two)."""
    tokens = _as_token_array(tokens)
    factors = list(dict.fromkeys(positive_int(f, "factor") for f in factors))
    factors.sort(key=lambda f: f != 1)  # 1× first: the longer factors compare with it
    policies = list(dict.fromkeys(policies))
    for p in policies:
        if p not in RUNG_POLICIES:
            raise ValueError(f"rung policy {p!r} is unknown: use one of {RUNG_POLICIES}")
    T = train_len(model)
    n = len(tokens)
    device = torch.device(device) if device is not None else _model_device(model)
    reference = model.with_seq_len(T, "freeze") if model.cfg.seq_len != T else model
    cells: list[ExtrapolationCell] = []
    shared: dict[int, ExtrapolationCell] = {}
    for m in factors:
        L = m * T
        for policy in policies:
            cell = ExtrapolationCell(m, policy, L)
            cells.append(cell)
            if n_windows(n, L) == 0:
                cell.skipped = (
                    f"the held-out split of {dataset!r} has {n} tokens; a window of "
                    f"{L} = {m}×{T} needs {L + 1}"
                )
                continue
            if model.cfg.attention == "dense" and policy == "freeze":
                cell.skipped = "dense attention has no rung set: 'freeze' equals 'recompute'"
                continue
            if m == 1 and 1 in shared:  # same model under both policies
                src = shared[1]
                cell.whole, cell.blocks, cell.windows = src.whole, src.blocks, src.windows
                cell.same_tokens = src.same_tokens
                cell.new_rungs, cell.positions = src.new_rungs, src.positions
                continue
            long = model.with_seq_len(L, rung_policy=policy).to(device)
            limit = None if limit_windows is None else max(1, limit_windows // m)
            pos = position_nll(
                long, tokens, L, max(1, batch_size // m), limit, device, per_window=(m == 1)
            )
            cell.positions, cell.windows = pos, pos.windows
            cell.whole, cell.blocks = pos.whole(), pos.blocks(T)
            base = shared.get(1)
            if base is not None and base.positions.windows >= m * pos.windows:
                k = np.arange(pos.windows) * m
                cell.same_tokens = [base.positions.windows_mean(k + j) for j in range(m)]
            cell.new_rungs = new_rungs(reference, long)
            del long
            if m == 1:
                shared[1] = cell
    return ExtrapolationResult(dataset, T, n, cells)


# --------------------------------------------------------------------------------------------
# position-resolved loss
# --------------------------------------------------------------------------------------------
def position_bin_edges(seq_len: int) -> tuple[int, ...]:
    """The paper's 9 bin edges for windows of seq_len: floor(b·(seq_len−1)/8), b = 0…8
    (seq_len 1024 gives POSITION_BIN_EDGES)."""
    positive_int(seq_len, "seq_len")
    if seq_len - 1 < N_BINS:
        raise ValueError(
            f"seq_len={seq_len} is too short for {N_BINS} position bins: need at "
            f"least {N_BINS + 1} positions"
        )
    return tuple(b * (seq_len - 1) // N_BINS for b in range(N_BINS + 1))


def bin_means(per_position: Sequence[float], edges: Sequence[int]) -> np.ndarray:
    """Mean of per_position over [edges[b], edges[b+1]) for each bin, (len(edges)−1,)."""
    p = np.asarray(per_position, dtype=np.float64)
    if edges[-1] > len(p) or any(a >= b for a, b in zip(edges, edges[1:])):
        raise ValueError(
            f"edges {tuple(edges)} must increase and end within the {len(p)} positions"
        )
    return np.array([p[a:b].mean() for a, b in zip(edges, edges[1:])])


def position_bins(pos: PositionNLL) -> PositionBins:
    """Bin a training-length PositionNLL with the paper's edges (module doc)."""
    edges = position_bin_edges(pos.seq_len)
    spans = [pos.span(a, b) for a, b in zip(edges, edges[1:])]
    return PositionBins(
        pos.seq_len,
        edges,
        tuple(s.loss for s in spans),
        tuple(s.tokens for s in spans),
        pos.windows,
    )


def position_resolved(
    model: FibLM, tokens, batch_size: int = 8, limit_windows: int | None = None, device=None
) -> PositionBins:
    """Position-binned NLL of `model` over training-length windows of `tokens`."""
    T = train_len(model)
    if model.cfg.seq_len != T:
        model = model.with_seq_len(T, "freeze")
    return position_bins(position_nll(model, tokens, T, batch_size, limit_windows, device))


def bin_gap(a, b) -> np.ndarray:
    """Per-bin difference a − b (e.g. fixed minus staggered: positive where b is better).
    a, b: PositionBins or sequences of per-bin NLLs of equal length."""
    if isinstance(a, PositionBins) and isinstance(b, PositionBins) and a.edges != b.edges:
        raise ValueError(
            f"bins with different edges {a.edges} and {b.edges} cannot be "
            f"compared: evaluate both at the same training length"
        )
    va = np.asarray(a.loss if isinstance(a, PositionBins) else a, dtype=np.float64)
    vb = np.asarray(b.loss if isinstance(b, PositionBins) else b, dtype=np.float64)
    if va.shape != vb.shape or va.ndim != 1:
        raise ValueError(
            f"bin_gap needs two equal-length 1-D bin vectors; got shapes {va.shape} and {vb.shape}"
        )
    return va - vb


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _as_token_array(tokens):
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.cpu().numpy()
    arr = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"tokens must be a 1-D integer array; got shape {arr.shape}, dtype {arr.dtype}"
        )
    return arr


def _model_seq_len(model) -> int:
    cfg = getattr(model, "cfg", None)
    if cfg is None:
        raise ValueError("the model has no cfg.seq_len: pass seq_len=")
    return cfg.seq_len


def _model_device(model) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")
