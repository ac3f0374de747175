"""Batch sampling and evaluation windows over one array of token ids.

`batch_rng(seed, step, micro, rank)` is np.random.default_rng([seed, step, micro, rank]): a
batch is a pure function of those numbers, so a resumed run sees exactly the batches an
uninterrupted one would and DDP ranks draw independent streams. Training windows are T+1
tokens, x = tokens[s:s+T], y = tokens[s+1:s+T+1], starts uniform in [0, n-T-1) (the paper's
rule; the very last window is never drawn). Evaluation windows are the non-overlapping
s = 0, T, 2T, ... of `lab.data.windows` (floor((n-1)/T) complete ones). `lab.data.prepared` and
`lab.data.mixture` draw their batches here.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from lab.data.windows import n_windows, window_starts
from lab.util.checks import nonneg_int, positive_int


def batch_rng(seed: int, step: int, micro: int = 0, rank: int = 0) -> np.random.Generator:
    """The batch generator: np.random.default_rng([seed, step, micro, rank])."""
    return np.random.default_rng(
        [
            nonneg_int(seed, "seed"),
            nonneg_int(step, "step"),
            nonneg_int(micro, "micro"),
            nonneg_int(rank, "rank"),
        ]
    )


def check_window(n: int, seq_len, what: str) -> None:
    """ValueError unless `what` (n tokens) holds a random training window of seq_len."""
    seq_len = positive_int(seq_len, "seq_len")
    if n <= seq_len + 1:
        raise ValueError(
            f"seq_len {seq_len} is too long for the {what} ({n} tokens; random "
            f"windows need n > seq_len + 1); use seq_len <= {max(n - 2, 0)} or more "
            f"data (for val: a larger val_tokens)"
        )


def windows_at(data: np.ndarray, starts: np.ndarray, seq_len: int) -> np.ndarray:
    """The windows of seq_len + 1 tokens at `starts` (B,): int64, (B, seq_len + 1)."""
    return np.asarray(data[starts[:, None] + np.arange(seq_len + 1)], dtype=np.int64)


def gather(data: np.ndarray, starts: np.ndarray, seq_len: int, device):
    """(x, y) of the windows of seq_len + 1 tokens at `starts` (B,): int64, (B, seq_len)."""
    return to_xy(windows_at(data, starts, seq_len), device)


class Batches:
    """The batch protocol of a training set — one corpus (`lab.data.prepared.PreparedData`) or
    a weighted mixture (`lab.data.mixture.Mixture`): ``draw`` decides a batch's windows from
    (seed, step, micro, rank) alone, which makes a resume exact and lets N ranks see what one
    process would; ``windows`` reads them; `get_batch` is the two, written once."""

    def draw(self, split, batch_size, seq_len, seed, step, micro=0, rank=0):
        raise NotImplementedError

    def windows(self, split: str, drawn, seq_len: int) -> np.ndarray:
        """The drawn windows' tokens, int64 (B, seq_len + 1)."""
        raise NotImplementedError

    def get_batch(
        self,
        split: str,
        batch_size: int,
        seq_len: int,
        seed: int,
        step: int,
        micro: int = 0,
        rank: int = 0,
        device=None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) int64 tensors of shape (batch_size, seq_len); y is x shifted by one token."""
        drawn = self.draw(split, batch_size, seq_len, seed, step, micro, rank)
        return to_xy(self.windows(split, drawn, seq_len), device)


def to_xy(buf: np.ndarray, device):
    """(x, y) int64 tensors from windows buf (B, T+1): x = buf[:, :-1], y = buf[:, 1:]."""
    x = torch.from_numpy(np.ascontiguousarray(buf[:, :-1]))
    y = torch.from_numpy(np.ascontiguousarray(buf[:, 1:]))
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


def window_batches(
    data: np.ndarray, seq_len, batch_size, limit, device, what: str
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The evaluation windows of `data`, `batch_size` at a time (the last batch may be short);
    ValueError if `what` is too short for one."""
    seq_len = positive_int(seq_len, "seq_len")
    batch_size = positive_int(batch_size, "batch_size")
    if n_windows(len(data), seq_len) == 0:
        raise ValueError(
            f"seq_len {seq_len} is too long for the {what} ({len(data)} tokens; an "
            f"eval window needs seq_len + 1); use seq_len <= {max(len(data) - 1, 0)}"
        )
    if limit is not None:
        limit = positive_int(limit, "limit")
    starts = window_starts(len(data), seq_len, batch_size, limit)  # (B,) offsets per batch
    return (gather(data, k, seq_len, device) for k in starts)
