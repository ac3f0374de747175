"""The held-out split: which tokens of one source (one mixture domain) are validation.

val_tokens=None holds out min(5% of the tokens, 500,000) (the paper held out ~500K tokens per
domain). Whole documents are held out, picked in a random order drawn from `seed`, until the
next one would overshoot; the remaining budget is taken from the *tail* of the next picked
document (its head stays in train). So the split is exactly `val_tokens` long, no document
straddles it except that one, and a one-document source (a single file, a .bin) degrades to
"the last val_tokens tokens". Both splits keep the original document order.
"""

from __future__ import annotations

import math

import numpy as np

VAL_FRACTION = 0.05
VAL_CAP = 500_000  # the paper held out ~500K tokens per domain
PAPER_VAL_TOKENS = 500_000


def default_val_tokens(n: int) -> int:
    """min(ceil(5% of n), 500,000), at least 1 and at most n-1."""
    return max(1, min(math.ceil(VAL_FRACTION * n), VAL_CAP, n - 1))


def split_documents(
    lengths: np.ndarray, val_tokens: int, seed: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int]:
    """The held-out rule (module doc) on a stream of documents with these token lengths:
    (train segments, val segments, number of documents touched by val), segments being
    [start, end) token ranges of the stream in stream order."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    take = np.zeros(len(lengths), dtype=np.int64)  # val tokens taken from each doc
    left = int(val_tokens)
    for i in np.random.default_rng(seed).permutation(len(lengths)):
        if left == 0:
            break
        t = min(int(lengths[i]), left)
        take[i] = t
        left -= t
    train, val = [], []
    for i in np.flatnonzero(take < lengths):  # train: heads of docs
        _append(train, int(starts[i]), int(starts[i] + lengths[i] - take[i]))
    for i in np.flatnonzero(take):  # val: tails of docs
        _append(val, int(starts[i] + lengths[i] - take[i]), int(starts[i] + lengths[i]))
    return train, val, int(np.count_nonzero(take))


def _append(segs: list, a: int, b: int) -> None:
    if segs and segs[-1][1] == a:
        segs[-1] = (segs[-1][0], b)
    elif b > a:
        segs.append((a, b))
