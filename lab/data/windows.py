"""The held-out window rule: how a split of n tokens is cut into scoring windows.

A window of length L reads L + 1 consecutive tokens (L inputs and the L targets one token on).
Windows start at 0, L, 2L, … so that their targets never overlap; a split of n tokens holds
floor((n − 1) / L) complete windows, and the tail that does not fill one is dropped and never
counted.  ``limit`` keeps only the first windows.  Training's evaluation (`lab.data.sampling`'s
``window_batches``) and the held-out measurements (`lab.evaluation.evaluate`) both cut windows here.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from lab.util.checks import positive_int


def n_windows(n_tokens: int, seq_len: int, limit: int | None = None) -> int:
    """Complete non-overlapping windows of seq_len (+1 target) in n_tokens: floor((n − 1) / L),
    at most `limit`."""
    L = positive_int(seq_len, "seq_len")
    count = max(int(n_tokens) - 1, 0) // L
    return count if limit is None else min(count, positive_int(limit, "limit"))


def window_starts(
    n_tokens: int, seq_len: int, batch_size: int, limit: int | None = None
) -> Iterator[np.ndarray]:
    """The windows' first-token offsets, `batch_size` at a time (the last batch may be short):
    int64 arrays (B,) of 0, L, 2L, … over the `n_windows(n_tokens, seq_len, limit)` windows."""
    count = n_windows(n_tokens, seq_len, limit)
    B = positive_int(batch_size, "batch_size")
    for a in range(0, count, B):
        yield np.arange(a, min(a + B, count), dtype=np.int64) * int(seq_len)
