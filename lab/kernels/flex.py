"""``impl="flex"``: integer columns through PyTorch's FlexAttention with a hand-built block mask.

    flex_columns_attention(q, k, v, dists, fracs, scale, *, interpolated=None) -> (B, H, T, D)

The maintained alternative to the Triton kernel on CUDA, and its independent oracle in
``benchmarks/gpu_check.py``.  It runs only integer columns (an integer α: the distances of a
layer's `lab.ladder.plan.ColumnPlan`, passed through `kernel_inputs` like every implementation): query t
attends key t − d for each distance d, one softmax.  FlexAttention has no interpolated rows, so a
learned α (columns with fractions) is refused with a ValueError naming the fix.

The block mask is built from the distances alone, with no (T, T) evaluation: for each query tile
of `BLOCK` rows, the key tiles its distances touch (at most two per distance); within a tile the
``mask_mod`` (q − k ∈ distances, a lookup table of T booleans) decides.  Masks are cached per
(distances, T, device).  On CUDA flex_attention runs torch.compile'd (one compile per shape); on
CPU it runs eagerly (it materialises the scores; PyTorch has no CPU backward for it, so gradients
need CUDA).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence

import torch

from lab.kernels.shapes import check_columns

BLOCK = 128
DTYPES = {"cuda": (torch.float32, torch.float16, torch.bfloat16)}
DTYPES["cpu"] = DTYPES["cuda"] + (torch.float64,)
_COMPILED: dict[str, object] = {}


def status(device: torch.device | str = "cuda") -> bool | str:
    """True when FlexAttention can run on tensors of `device` here, else the reason."""
    dev = torch.device(device).type
    if dev not in DTYPES:
        return f"FlexAttention runs on CPU or CUDA tensors here, not {dev}"
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except Exception as err:
        return f"torch.nn.attention.flex_attention cannot be imported ({type(err).__name__}: {err})"
    if dev == "cuda" and not torch.cuda.is_available():
        return "no CUDA device here"
    return True


def key_tiles(dists: Sequence[int], T: int, block: int = BLOCK) -> list[list[int]]:
    """For each query tile, the sorted key tiles some distance reaches (pure: no torch)."""
    n = (T + block - 1) // block
    rows = []
    for qb in range(n):
        q0, q1 = qb * block, min(T, qb * block + block) - 1
        tiles: set[int] = set()
        for d in dists:
            if q1 - d >= 0:
                tiles.update(range(max(q0 - d, 0) // block, (q1 - d) // block + 1))
        rows.append(sorted(tiles))
    return rows


@functools.lru_cache(maxsize=64)
def _block_mask(dists: tuple[int, ...], T: int, device: str, block: int):
    from torch.nn.attention.flex_attention import BlockMask

    dev = torch.device(device)
    lut = torch.zeros(T, dtype=torch.bool, device=dev)  # (T,) distance d attended?
    inside = [d for d in dists if d < T]
    if inside:
        lut[torch.tensor(inside, device=dev)] = True

    def mask_mod(b, h, qi, ki):
        delta = qi - ki
        return (delta >= 0) & lut[delta.clamp(min=0, max=T - 1)]

    rows = key_tiles(dists, T, block)
    width = max(1, max(len(r) for r in rows))
    idx = torch.zeros(1, 1, len(rows), width, dtype=torch.int32)  # (1, 1, tiles, width)
    num = torch.tensor([[[len(r) for r in rows]]], dtype=torch.int32)  # (1, 1, tiles)
    for i, r in enumerate(rows):
        idx[0, 0, i, : len(r)] = torch.tensor(r, dtype=torch.int32)
    return BlockMask.from_kv_blocks(
        num.to(dev), idx.to(dev), BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(T, T)
    )


def block_mask(dists: Sequence[int], T: int, device="cpu", block: int = BLOCK):
    """The (cached) FlexAttention BlockMask of an integer attended set at length T."""
    return _block_mask(tuple(sorted(int(d) for d in dists)), int(T), str(device), int(block))


def _flex_fn(device_type: str):
    from torch.nn.attention.flex_attention import flex_attention

    if device_type != "cuda":
        return flex_attention
    if "cuda" not in _COMPILED:
        _COMPILED["cuda"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["cuda"]


def _integer_dists(dists, fracs, interpolated) -> tuple[int, ...]:
    d = [int(x) for x in dists.detach().cpu().tolist()]
    if interpolated is not None:
        marked = torch.as_tensor(interpolated, dtype=torch.bool).cpu()
        has_frac = bool(marked.any())
    else:
        has_frac = bool((fracs.detach() != 0).any()) or fracs.requires_grad
    if has_frac:
        raise ValueError(
            "impl='flex' runs integer α only (these columns carry fractions, a learned α): "
            "pass α as a float, or use impl='auto' for a learned α"
        )
    if len(set(d)) != len(d):
        raise ValueError(
            f"impl='flex' needs distinct distances (a mask counts a key once); got {sorted(d)}"
        )
    return tuple(d)


def flex_columns_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dists: torch.Tensor,
    fracs: torch.Tensor,
    scale: float,
    *,
    interpolated: torch.Tensor | Sequence[bool] | None = None,
) -> torch.Tensor:
    """Softmax attention over integer columns through FlexAttention.  Returns (B, H, T, D)."""
    dev_type = q.device.type
    if torch.is_autocast_enabled(dev_type):  # like SDPA: one autocast dtype for all
        dt = torch.get_autocast_dtype(dev_type)
        q, k, v = q.to(dt), k.to(dt), v.to(dt)
    check_columns(q, k, v, dists, fracs, scale)
    ds = _integer_dists(dists, fracs, interpolated)
    ok = status(q.device)
    if ok is not True:
        raise ValueError(f"impl='flex' cannot run here: {ok}. Use impl='auto'")
    if dev_type == "cpu" and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
        raise ValueError(
            "impl='flex' has no backward on CPU (PyTorch's FlexAttention): run it under "
            "torch.no_grad() or on CUDA, or use impl='auto'"
        )
    T = q.shape[-2]
    mask = block_mask(ds, T, q.device)
    fn = _flex_fn(dev_type)
    with warnings.catch_warnings():  # eager flex on CPU warns that it is unfused: we know
        warnings.simplefilter("ignore", UserWarning)
        return fn(q, k, v, block_mask=mask, scale=float(scale), enable_gqa=q.shape[1] != k.shape[1])
