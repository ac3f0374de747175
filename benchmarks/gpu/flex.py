"""flex_attention over an integer attended set: `lab.kernels.flex` (impl="flex", the block mask
built by hand from the plan's distances, no (T, T) mask evaluation), wrapped for the sections: a
checked path in section 1, the Triton comparison in the gate, the timing table's last column."""

from __future__ import annotations

import math

import torch

from lab import kernels
from lab.kernels import flex


class FlexInteger:
    """impl="flex" over fixed integer distances at length T (mask built and cached on first
    use; torch.compile'd on CUDA, eager forward on CPU)."""

    def __init__(self, dists, T: int, device: torch.device, block: int = flex.BLOCK):
        self.dists = torch.tensor(sorted(set(int(d) for d in dists)), dtype=torch.int64)
        rows = flex.key_tiles(self.dists.tolist(), T, block)
        self.tiles_per_row = sum(len(r) for r in rows) / len(rows)
        flex.block_mask(self.dists.tolist(), T, device, block)  # build it now, outside timing

    def __call__(self, q, k, v, scale=None):
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        zeros = torch.zeros(len(self.dists), device=q.device)
        return kernels.columns_attention(q, k, v, self.dists, zeros, scale, impl="flex")


def flex_available(device: torch.device | str = "cuda") -> bool:
    return flex.status(device) is True
