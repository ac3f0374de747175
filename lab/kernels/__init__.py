"""Column-attention implementations and the choice between them.

One low-level operation, several implementations of the same math:

    columns_attention(q, k, v, dists, fracs, scale, impl="auto", *, interpolated=None)

q (B, H, T, D); k, v (B, KV, T, D), H % KV == 0, query head h reads KV head h // (H/KV);
dists (C,) int64 distances lo_c ≥ 0; fracs (C,) float, 0 for integer columns.  Column c at query
t ≥ lo_c reads the key/value (1 − f_c)·row[t − lo_c] + f_c·row[max(t − lo_c − 1, 0)]; t < lo_c is
masked.  One softmax over the C columns per query.  Differentiable in q, k, v and fracs (the
caller builds fracs = α·f_k − lo on α's graph, so the gradient reaches α).  ``interpolated``
(bool (C,)) marks the columns that may read a second row; unmarked columns must have f = 0 and
get no d/dfrac (saves the second-row work on the window); default: all columns when fracs
requires grad, else those with f ≠ 0.

Implementations (``impl``):

``torch``    the pure-PyTorch reference, `lab.kernels.reference` (any device/dtype)
``cpp``      the fused C++/OpenMP kernel, `lab.kernels.cpu` (CPU, float32/float64), compiled on
             first use and cached
``triton``   the fused Triton kernel, `lab.kernels.triton_attn` (CUDA; float32/16/bf16)
``auto``     the fastest available for the tensors' device: cpp on CPU, triton on CUDA, else
             torch.  When the chosen kernel cannot be built or imported (no compiler, no
             Triton) it falls back to torch with a one-line warning (once per kernel); for a
             dtype the kernel does not support it falls back silently.

The environment variable ``FIBLAB_ATTN_IMPL`` (torch | cpp | triton | auto) overrides
``impl="auto"`` for a whole process, e.g. ``FIBLAB_ATTN_IMPL=torch`` to compare against the
reference; a forced implementation that cannot run raises instead of falling back.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

import torch

from lab.kernels import cpu
from lab.kernels.reference import columns_attention_reference
from lab.kernels.shapes import check_columns

IMPLS = ("auto", "torch", "cpp", "triton")
ENV = "FIBLAB_ATTN_IMPL"
TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_WARNED: set[str] = set()


# --------------------------------------------------------------------------------------------
# what can run here
# --------------------------------------------------------------------------------------------
def _triton_module():
    """The Triton kernel module, imported lazily (it may be absent); raises ImportError."""
    from lab.kernels import triton_attn

    return triton_attn


def triton_status(device: torch.device | str = "cuda") -> bool | str:
    """True when the Triton kernel can run on tensors of `device`, else the reason."""
    try:
        mod = _triton_module()
    except Exception as err:  # triton or the module missing
        return f"lab.kernels.triton_attn cannot be imported ({type(err).__name__}: {err})"
    check = getattr(mod, "available", None)
    if check is not None and not check(device):
        return (
            f"Triton cannot run on {torch.device(device).type} tensors here (needs a CUDA "
            f"device, or TRITON_INTERPRET=1 for CPU tests)"
        )
    return True


def available() -> dict[str, bool | str]:
    """{implementation: True, or the reason it cannot run}.  'cpp' is built on first call
    (tens of seconds once, then cached); 'triton' is checked for CUDA tensors."""
    return {"torch": True, "cpp": cpu.status(), "triton": triton_status("cuda")}


def _blocker(impl: str, device: str, dtype: torch.dtype) -> tuple[str, str] | None:
    """Why `impl` cannot run on (device, dtype): ("missing" | "unsupported", reason) or None."""
    if impl == "torch":
        return None
    if impl == "cpp":
        if device != "cpu":
            return "unsupported", f"the C++ kernel runs on CPU tensors, not {device}"
        if dtype not in cpu.DTYPES:
            return "unsupported", f"the C++ kernel supports float32 / float64, not {dtype}"
        status = cpu.status()
        return None if status is True else ("missing", status)
    if dtype not in TRITON_DTYPES:
        return (
            "unsupported",
            f"the Triton kernel supports float32 / float16 / bfloat16, not {dtype}",
        )
    status = triton_status(device)
    return None if status is True else ("missing", status)


def resolve(
    impl: str = "auto", device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> str:
    """The implementation `columns_attention(..., impl=impl)` uses for tensors of (device,
    dtype): one of 'torch', 'cpp', 'triton'.  Honours FIBLAB_ATTN_IMPL when impl is 'auto'."""
    source = "impl"
    if impl == "auto" and os.environ.get(ENV, "").strip():
        impl, source = os.environ[ENV].strip(), ENV
    if impl not in IMPLS:
        raise ValueError(f"{source}={impl!r} is unknown: use one of {IMPLS}")
    dev = torch.device(device).type
    if impl != "auto":
        block = _blocker(impl, dev, dtype)
        if block is not None:
            raise RuntimeError(
                f"{source}={impl!r} cannot run here: {block[1]}. Use 'auto' (falls "
                f"back to 'torch') or 'torch'"
            )
        return impl
    choice = {"cpu": "cpp", "cuda": "triton"}.get(dev)
    if choice is None:
        return "torch"
    block = _blocker(choice, dev, dtype)
    if block is None:
        return choice
    kind, reason = block
    if kind == "missing" and choice not in _WARNED:
        _WARNED.add(choice)
        warnings.warn(
            f"fiblab: the {choice} attention kernel is unavailable ({reason}); using "
            f"the pure-PyTorch path",
            RuntimeWarning,
            stacklevel=3,
        )
    return "torch"


# --------------------------------------------------------------------------------------------
# the operation
# --------------------------------------------------------------------------------------------
def columns_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dists: torch.Tensor,
    fracs: torch.Tensor,
    scale: float,
    impl: str = "auto",
    *,
    interpolated: torch.Tensor | Sequence[bool] | None = None,
) -> torch.Tensor:
    """Softmax attention over C columns (see the module docstring).  Returns (B, H, T, D)."""
    check_columns(q, k, v, dists, fracs, scale)
    which = resolve(impl, q.device, q.dtype)
    if which == "cpp":
        return cpu.cpp_columns_attention(q, k, v, dists, fracs, scale, interpolated=interpolated)
    if which == "triton":
        return _triton_module().triton_columns_attention(
            q, k, v, dists, fracs, scale, interpolated=interpolated
        )
    return columns_attention_reference(q, k, v, dists, fracs, scale, interpolated=interpolated)
