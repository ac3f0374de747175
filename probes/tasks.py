"""Seeded synthetic retrieval tasks for probing sparse attention.

Every generator is a pure function of its arguments: it takes a `torch.Generator` or an int seed
(an int builds a fresh CPU generator, so the same int gives the same batch; a generator is
advanced, so successive calls give successive batches) and returns int64 CPU tensors.  Positions
that carry no target hold IGNORE = -100, `F.cross_entropy`'s default ignore_index.

marked copy (the paper's Table 2 probe; `MarkedCopy`, `marked_copy_batch`)
    x_t = p_t + P·c_t with payload p_t ~ U[0, P) and marker c_t ~ U{0, …, len(DS)−1}
    (P = 256, DS = (200, 350), T = 512, vocab 512).  The target at t is the full id
    x_{t − DS[c_t]}; positions with t < DS[c_t] are ignored.  The marker tells the model which
    distance to read.  `marked_copy_accuracy` scores each marker class separately.
    Chance: 1/512 for a guess uniform over the vocabulary (1/256 knowing the target's marker).

key–value retrieval with distractors (`KVRetrieval`, `kv_retrieval_batch`)
    Filler ~ U[filler range); the target pair (K*, V*) sits at (T−2−d, T−1−d), so V* is exactly
    d before the query position T−1, which holds K* again.  `n_distract` pairs (K_i, V_i), key
    immediately followed by its value, sit at random non-overlapping positions clear of the
    target pair and the query, placed uniformly over all such arrangements.  Keys are distinct,
    values are distinct, each range is disjoint from the others.  Scored at the last position by
    a forced choice among the 1 + n_distract values present (`forced_choice_accuracy`).
    Chance: 1/(1 + n_distract) = 0.2 forced choice; 1/4000 for a guess uniform over the values.
    Distances for training / evaluation: `sample_distance(kind, generator)`, `EVAL_DISTANCES`.

shift copy (`ShiftCopy`, `shift_copy_batch`)
    x_t ~ U[0, 256), vocab 512, T = 1024; the target at t is x_{t−d} for t >= d, else ignored.
    Chance: 1/256 for a guess uniform over the ids in use (1/512 uniform over the vocabulary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Union

import torch

IGNORE = -100  # F.cross_entropy's default ignore_index

GeneratorLike = Union[torch.Generator, int]


# --------------------------------------------------------------------------------------- helpers


def as_generator(generator: GeneratorLike | None) -> torch.Generator:
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool) or not isinstance(generator, int):
        raise ValueError(
            f"generator={generator!r} must be a torch.Generator or an int seed; "
            f"pass one so the batch can be reproduced"
        )
    return torch.Generator().manual_seed(generator)


def check_int(name: str, value, lo: int, hi: int | None = None, fix: str = "") -> None:
    """Raise ValueError unless value is an int in [lo, hi] (hi=None: no upper bound)."""
    ok = not isinstance(value, bool) and isinstance(value, int) and value >= lo
    ok = ok and (hi is None or value <= hi)
    if not ok:
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(
            f"{name}={value!r} must be an integer {bound}" + (f"; {fix}" if fix else "")
        )


def _check_logits(logits: torch.Tensor, x: torch.Tensor) -> None:
    if x.dim() != 2 or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(x.shape):
        raise ValueError(
            f"logits {tuple(logits.shape)} must be (B, T, V) with (B, T) = x.shape {tuple(x.shape)}"
        )


# ----------------------------------------------------------------------------------- marked copy


@dataclass(frozen=True)
class MarkedCopy:
    seq_len: int = 512
    vocab: int = 512
    n_payload: int = 256  # P: payload ids in [0, P); marker j adds j·P
    distances: tuple = (200, 350)  # DS: marker j means "copy from DS[j] back"

    def __post_init__(self):
        check_int("seq_len", self.seq_len, 2)
        check_int("n_payload", self.n_payload, 1)
        if len(self.distances) < 1:
            raise ValueError(f"distances={self.distances!r} must hold at least one distance")
        for d in self.distances:
            check_int(
                "distance",
                d,
                1,
                self.seq_len - 1,
                f"every distance in distances={self.distances!r} must be < "
                f"seq_len={self.seq_len}: shorten it or raise seq_len",
            )
        need = self.n_payload * len(self.distances)
        if isinstance(self.vocab, bool) or not isinstance(self.vocab, int) or self.vocab < need:
            raise ValueError(
                f"vocab={self.vocab!r} is too small: n_payload={self.n_payload} × "
                f"{len(self.distances)} markers needs ids up to {need}; raise vocab "
                f"to >= {need} or lower n_payload"
            )


def marked_copy_batch(
    batch: int, cfg: MarkedCopy = MarkedCopy(), generator: GeneratorLike | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y), both (B, T) int64: inputs p + P·c and targets x[t − DS[c_t]] or IGNORE."""
    check_int("batch", batch, 1)
    g = as_generator(generator)
    B, T, P = batch, cfg.seq_len, cfg.n_payload
    payload = torch.randint(0, P, (B, T), generator=g)  # (B, T)
    marker = torch.randint(0, len(cfg.distances), (B, T), generator=g)  # (B, T)
    x = payload + P * marker  # (B, T)
    dist = torch.tensor(cfg.distances, dtype=torch.long)[marker]  # (B, T)
    src = torch.arange(T) - dist  # (B, T) source pos
    y = torch.where(src >= 0, x.gather(1, src.clamp(min=0)), IGNORE)  # (B, T)
    return x, y


def marked_copy_accuracy(
    logits: torch.Tensor, x: torch.Tensor, cfg: MarkedCopy = MarkedCopy()
) -> dict[int, float]:
    """{j: accuracy} over positions with marker j and t >= DS[j]; NaN when a class has none."""
    _check_logits(logits, x)
    T = x.shape[1]
    x = x.to(logits.device)
    pred = logits.argmax(-1)  # (B, T)
    marker = x // cfg.n_payload  # (B, T)
    out = {}
    for j, d in enumerate(cfg.distances):
        if d >= T:
            raise ValueError(
                f"distance={d} >= sequence length {T} of x: use a config whose "
                f"distances fit the batch"
            )
        mask = marker[:, d:] == j  # (B, T − d)
        hit = (pred[:, d:] == x[:, :-d]) & mask  # (B, T − d)
        n = int(mask.sum())
        out[j] = float(hit.sum()) / n if n else math.nan
    return out


# ------------------------------------------------------------------------------ key-value recall


@dataclass(frozen=True)
class KVRetrieval:
    seq_len: int = 1024
    vocab: int = 32768
    filler: tuple = (0, 20000)  # [lo, hi) of each token range
    keys: tuple = (20000, 24000)
    values: tuple = (24000, 28000)
    n_distract: int = 4

    def __post_init__(self):
        check_int("seq_len", self.seq_len, 3, fix="the target pair and the query need 3 positions")
        check_int("vocab", self.vocab, 1)
        check_int("n_distract", self.n_distract, 0)
        ranges = {"filler": self.filler, "keys": self.keys, "values": self.values}
        for name, r in ranges.items():
            ok = (
                len(r) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in r)
                and 0 <= r[0] < r[1] <= self.vocab
            )
            if not ok:
                raise ValueError(
                    f"{name}={r!r} must be a range (lo, hi) with 0 <= lo < hi <= "
                    f"vocab={self.vocab}; shrink the range or raise vocab"
                )
        names = list(ranges)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if ranges[a][0] < ranges[b][1] and ranges[b][0] < ranges[a][1]:
                    raise ValueError(
                        f"{a}={ranges[a]!r} overlaps {b}={ranges[b]!r}: token "
                        f"ranges must be disjoint so keys and values are unambiguous"
                    )
        for name in ("keys", "values"):
            lo, hi = ranges[name]
            if hi - lo < 1 + self.n_distract:
                raise ValueError(
                    f"n_distract={self.n_distract} needs {1 + self.n_distract} "
                    f"distinct {name} but {name}={ranges[name]!r} holds {hi - lo}; "
                    f"widen the range or lower n_distract"
                )


class KVBatch(NamedTuple):
    x: torch.Tensor  # (B, T) int64 inputs; x[:, T−1] is the query key K*
    answer: torch.Tensor  # (B,) int64 V*
    candidates: torch.Tensor  # (B, 1 + n_distract) int64 the values present, in random order
    answer_index: torch.Tensor  # (B,) int64 candidates[b, answer_index[b]] == answer[b]


def _pair_split_weights(a: int, b: int, n: int) -> list[float]:
    """Relative number of placements of n pairs with k in a run of a cells and n − k in b cells.

    n non-overlapping pairs fit a run of m cells in C(m − n, n) ways (squeeze each pair to one
    cell); weighting k by the product makes the placement uniform over all arrangements."""

    def ways(m: int, k: int) -> int:
        return math.comb(m - k, k) if m - k >= k else 0

    w = [ways(a, k) * ways(b, n - k) for k in range(n + 1)]
    top = max(w)
    return [v / top for v in w]  # exact int division: no overflow for large counts


def _place_pairs(counts: torch.Tensor, length: int, g: torch.Generator) -> torch.Tensor:
    """Start offsets of counts[b] non-overlapping pairs in a run of `length` cells, uniform.

    Choose counts[b] of the first length − counts[b] cells (random ranks), then shift the i-th
    chosen cell right by i: the standard bijection to non-overlapping pairs.  Returns a (B, length)
    bool mask of pair starts."""
    B = counts.shape[0]
    if length == 0:
        return torch.zeros(B, 0, dtype=torch.bool)
    j = torch.arange(length)  # (L,)
    scores = torch.rand(B, length, generator=g)  # (B, L)
    scores = scores.masked_fill(j >= (length - counts)[:, None], 2.0)  # unusable cells last
    rank = scores.argsort(1).argsort(1)  # (B, L)
    chosen = rank < counts[:, None]  # (B, L)
    start = j + chosen.long().cumsum(1) - 1  # (B, L) shifted cells
    mask = torch.zeros(B, length + 1, dtype=torch.bool)
    mask.scatter_(1, torch.where(chosen, start, length), True)  # column L: discard
    return mask[:, :length]


def kv_retrieval_batch(
    batch: int, d: int, cfg: KVRetrieval = KVRetrieval(), generator: GeneratorLike | None = None
) -> KVBatch:
    """x (B, T), answer (B,), candidates (B, 1 + n_distract), answer_index (B,); one d per batch."""
    check_int("batch", batch, 1)
    T, n = cfg.seq_len, cfg.n_distract
    check_int(
        "d",
        d,
        1,
        T - 2,
        f"V* sits at T-1-d and K* at T-2-d, so d must be < "
        f"seq_len-1={T - 1}: shorten d or raise seq_len",
    )
    a, b = T - 2 - d, d - 1  # free runs [0, T−2−d) and [T−d, T−1)
    if a // 2 + b // 2 < n:
        raise ValueError(
            f"n_distract={n} pairs do not fit at d={d}, seq_len={T}: the free runs "
            f"of {a} and {b} cells hold {a // 2 + b // 2} pairs; lower n_distract "
            f"or raise seq_len"
        )
    g = as_generator(generator)
    B = batch

    x = torch.randint(*cfg.filler, (B, T), generator=g)  # (B, T) filler
    keys = (
        torch.multinomial(torch.ones(B, cfg.keys[1] - cfg.keys[0]), 1 + n, generator=g)
        + cfg.keys[0]
    )  # (B, 1+n) distinct
    cands = (
        torch.multinomial(torch.ones(B, cfg.values[1] - cfg.values[0]), 1 + n, generator=g)
        + cfg.values[0]
    )  # (B, 1+n) distinct
    ans_idx = torch.randint(0, 1 + n, (B,), generator=g)  # (B,)
    answer = cands.gather(1, ans_idx[:, None]).squeeze(1)  # (B,)

    x[:, T - 2 - d] = keys[:, 0]
    x[:, T - 1 - d] = answer
    x[:, T - 1] = keys[:, 0]
    if n:
        w = torch.tensor(_pair_split_weights(a, b, n), dtype=torch.float64)
        k_left = torch.multinomial(w, B, replacement=True, generator=g)  # (B,) pairs in run a
        starts = torch.cat(
            [
                _place_pairs(k_left, a, g),  # (B, T) start mask
                torch.zeros(B, 2, dtype=torch.bool),
                _place_pairs(n - k_left, b, g),
                torch.zeros(B, 1, dtype=torch.bool),
            ],
            1,
        )
        pos = starts.nonzero()[:, 1].view(B, n)  # (B, n) sorted starts
        i = torch.arange(n)
        other = i + (i[None, :] >= ans_idx[:, None]).long()  # (B, n) skip the answer
        x.scatter_(1, pos, keys[:, 1:])
        x.scatter_(1, pos + 1, cands.gather(1, other))
    return KVBatch(x, answer, cands, ans_idx)


def forced_choice_accuracy(
    last_logits: torch.Tensor, candidates: torch.Tensor, answer_index: torch.Tensor
) -> float:
    """Fraction of rows whose highest logit among the candidate values is the answer's."""
    if (
        last_logits.dim() != 2
        or candidates.dim() != 2
        or answer_index.dim() != 1
        or not (last_logits.shape[0] == candidates.shape[0] == answer_index.shape[0])
    ):
        raise ValueError(
            f"last_logits {tuple(last_logits.shape)}, candidates "
            f"{tuple(candidates.shape)}, answer_index {tuple(answer_index.shape)} "
            f"must be (B, V), (B, C), (B,)"
        )
    scores = last_logits.gather(1, candidates.to(last_logits.device))  # (B, C)
    pick = scores.argmax(1)  # (B,)
    return float((pick == answer_index.to(pick.device)).float().mean())


# (lo, hi) inclusive bands; a sampled d is uniform over their union
DISTANCE_BANDS = {
    "coverage": ((16, 900),),
    "band": ((773, 823),),
    "multiband": ((280, 320), (580, 620), (780, 820)),
}
EVAL_DISTANCES = {
    "coverage": tuple(range(40, 881, 40)),
    "band": (120, 250, 400, 610, 700, 770, 798, 820, 850, 937),
    "multiband": (120, 300, 450, 600, 720, 800, 880),
}


def sample_distance(kind: str, generator: GeneratorLike) -> int:
    """One training distance d for a batch, uniform over the bands of `kind`."""
    if kind not in DISTANCE_BANDS:
        raise ValueError(f"kind={kind!r} is unknown: use one of {tuple(DISTANCE_BANDS)}")
    g = as_generator(generator)
    bands = DISTANCE_BANDS[kind]
    width = torch.tensor([hi - lo + 1 for lo, hi in bands], dtype=torch.float64)
    i = int(torch.multinomial(width, 1, generator=g))
    lo, hi = bands[i]
    return int(torch.randint(lo, hi + 1, (1,), generator=g))


# ------------------------------------------------------------------------------------ shift copy


@dataclass(frozen=True)
class ShiftCopy:
    seq_len: int = 1024
    vocab: int = 512
    n_tokens: int = 256  # inputs uniform in [0, n_tokens)

    def __post_init__(self):
        check_int("seq_len", self.seq_len, 2)
        check_int("n_tokens", self.n_tokens, 1)
        if (
            isinstance(self.vocab, bool)
            or not isinstance(self.vocab, int)
            or self.vocab < self.n_tokens
        ):
            raise ValueError(
                f"vocab={self.vocab!r} is smaller than n_tokens={self.n_tokens}: "
                f"raise vocab or lower n_tokens"
            )


def shift_copy_batch(
    batch: int, d: int, cfg: ShiftCopy = ShiftCopy(), generator: GeneratorLike | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y), both (B, T) int64: y[:, t] = x[:, t − d] for t >= d, else IGNORE."""
    check_int("batch", batch, 1)
    T = cfg.seq_len
    check_int("d", d, 1, T - 1, f"d must be < seq_len={T}: shorten d or raise seq_len")
    g = as_generator(generator)
    x = torch.randint(0, cfg.n_tokens, (batch, T), generator=g)  # (B, T)
    y = torch.full_like(x, IGNORE)  # (B, T)
    y[:, d:] = x[:, :-d]
    return x, y


def shift_copy_accuracy(logits: torch.Tensor, x: torch.Tensor, d: int) -> float:
    """Mean over positions t >= d of [argmax logits[:, t] == x[:, t − d]]."""
    _check_logits(logits, x)
    T = x.shape[1]
    check_int("d", d, 1, T - 1, f"d must be < the sequence length {T} of x")
    pred = logits[:, d:].argmax(-1)  # (B, T − d)
    return float((pred == x[:, :-d].to(logits.device)).float().mean())
