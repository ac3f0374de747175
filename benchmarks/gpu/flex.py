"""flex_attention over an integer attended set, with a block mask built by hand (no (T, T)
mask evaluation): a checked path in section 1 and the timing table's last column."""

from __future__ import annotations

import torch


class FlexInteger:
    """flex_attention over an integer attended set with a block mask built by hand: for each
    128-query tile, the key tiles its distances touch (≤ 2 per distance), no (T, T) evaluation.
    Compiled once per length (torch.compile on CUDA; eager on CPU)."""

    def __init__(self, dists, T: int, device: torch.device, block: int = 128):
        from torch.nn.attention.flex_attention import BlockMask, flex_attention

        lut = torch.zeros(T, dtype=torch.bool, device=device)
        lut[torch.tensor(sorted(set(dists)), device=device)] = True

        def mask_mod(b, h, qi, ki):
            delta = qi - ki
            return (delta >= 0) & lut[delta.clamp(min=0)]

        n = (T + block - 1) // block
        rows = []
        for qb in range(n):
            q0, q1 = qb * block, min(T, qb * block + block) - 1
            tiles = set()
            for lo in dists:
                if q1 - lo >= 0:
                    tiles.update(range(max(q0 - lo, 0) // block, (q1 - lo) // block + 1))
            rows.append(sorted(tiles))
        width = max(1, max(len(r) for r in rows))
        idx = torch.zeros(1, 1, n, width, dtype=torch.int32)
        num = torch.zeros(1, 1, n, dtype=torch.int32)
        for i, r in enumerate(rows):
            num[0, 0, i] = len(r)
            idx[0, 0, i, : len(r)] = torch.tensor(r, dtype=torch.int32)
        self.tiles_per_row = sum(len(r) for r in rows) / n
        self.mask = BlockMask.from_kv_blocks(
            num.to(device), idx.to(device), BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(T, T)
        )
        self.fn = (
            torch.compile(flex_attention, dynamic=False)
            if device.type == "cuda"
            else flex_attention
        )

    def __call__(self, q, k, v, scale=None):
        return self.fn(
            q, k, v, block_mask=self.mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )


def flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention  # noqa: F401

        return True
    except Exception:
        return False
