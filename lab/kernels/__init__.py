"""Column attention and the choice between its implementations: `columns_attention(q, k, v,
dists, fracs, scale, impl="auto")` — one softmax over C columns per query, each column an
integer or interpolated row offset — in pure PyTorch (the reference), a fused C++ kernel, a
fused Triton kernel or FlexAttention; ``impl="auto"`` measures which is fastest on this machine
and falls back to the reference with one warning where a kernel cannot run.  The contract,
every implementation and the choice rule are specified in docs/kernels.md.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

import torch

from lab.kernels import cpu, flex, selfcheck
from lab.kernels.reference import columns_attention_reference
from lab.kernels.shapes import check_columns
from lab.machine import autotune

IMPLS = ("auto", "torch", "cpp", "triton", "flex")
ENV = "FIBLAB_ATTN_IMPL"
TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DEVICE_KERNEL = {"cpu": "cpp", "cuda": "triton"}  # what 'auto' prefers on each device type
_WARNED: set[str] = set()


class ImplUnavailable(ValueError):
    """A forced implementation (``impl=`` or FIBLAB_ATTN_IMPL) that cannot run here.  The
    user's setting is at fault, not the lab: a ValueError, so the CLI prints its one line and
    exits 2."""


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
    return {
        "torch": True,
        "cpp": cpu.status(),
        "triton": triton_status("cuda"),
        "flex": flex.status("cuda"),
    }


def _blocker(impl: str, device: str, dtype: torch.dtype) -> tuple[str, str] | None:
    """Why `impl` cannot run on (device, dtype): ("missing" | "unsupported", reason) or None."""
    if impl == "torch":
        return None
    if impl == "flex":
        status = flex.status(device)
        if status is not True:
            return "missing", status
        if dtype not in flex.DTYPES[device]:
            names = ", ".join(str(d).removeprefix("torch.") for d in flex.DTYPES[device])
            return "unsupported", f"FlexAttention on {device} supports {names}, not {dtype}"
        return None
    if impl == "cpp":
        if device != "cpu":
            return "unsupported", f"the C++ kernel runs on CPU tensors, not {device}"
        if dtype not in cpu.DTYPES:
            return (
                "unsupported",
                f"the C++ kernel supports float32 / float64 / bfloat16, not {dtype}",
            )
        status = cpu.status()
        return None if status is True else ("missing", status)
    if dtype not in TRITON_DTYPES:
        return (
            "unsupported",
            f"the Triton kernel supports float32 / float16 / bfloat16, not {dtype}",
        )
    status = triton_status(device)
    return None if status is True else ("missing", status)


def _runnable(dev: str, dtype: torch.dtype, device: torch.device | str | None = None) -> list[str]:
    """What 'auto' may use on (device type, dtype), the static choice first.  Warns once per
    kernel when the device's kernel is missing (cannot build / import); Triton only once its
    first-use check on `device` (default: the type's current device) has passed."""
    preferred = DEVICE_KERNEL.get(dev)
    if preferred is None:
        return ["torch"]
    block = _blocker(preferred, dev, dtype)
    if block is None:
        if preferred == "triton" and not _triton_trusted(dev if device is None else device, dtype):
            return ["torch"]
        return [preferred, "torch"]
    kind, reason = block
    if kind == "missing" and preferred not in _WARNED:
        _WARNED.add(preferred)
        warnings.warn(
            f"fiblab: the {preferred} attention kernel is unavailable ({reason}); using "
            f"the pure-PyTorch path",
            RuntimeWarning,
            stacklevel=4,
        )
    return ["torch"]


def _triton_trusted(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Has the Triton kernel passed its first-use check on (device, dtype) in this process?
    Runs the check when there is no verdict yet and it can run (not while tracing)."""
    v = selfcheck.cached(device, dtype)
    if v is None:
        if not selfcheck.can_check():
            return False  # no verdict and none to be had now: the safe path
        v = selfcheck.verdict(lambda *a: _run("triton", *a), device, dtype)
    return v.ok


def resolve(
    impl: str = "auto",
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    *,
    call: tuple | None = None,
) -> str:
    """The implementation `columns_attention(..., impl=impl)` uses for tensors of (device,
    dtype): one of 'torch', 'cpp', 'triton'.  Honours FIBLAB_ATTN_IMPL when impl is 'auto'.

    ``call`` (q, k, v, dists, fracs, scale, interpolated): the call's own arguments, which let
    'auto' measure the runnable implementations on them (`lab.machine.autotune.choose`); without it,
    or where measuring means nothing, 'auto' is the static order."""
    source = "impl"
    if impl == "auto" and os.environ.get(ENV, "").strip():
        impl, source = os.environ[ENV].strip(), ENV
    if impl not in IMPLS:
        raise ValueError(f"{source}={impl!r} is unknown: use one of {IMPLS}")
    dev = torch.device(device).type
    if impl != "auto":
        block = _blocker(impl, dev, dtype)
        if block is not None:
            raise ImplUnavailable(
                f"{source}={impl!r} cannot run here: {block[1]}. Use 'auto' (falls "
                f"back to 'torch') or 'torch'"
            )
        return impl
    names = _runnable(dev, dtype, device)
    if len(names) == 1 or call is None or not autotune.measurable(*call[:5]):
        return names[0]
    q, k, v, dists, fracs, scale, interpolated = call
    B, H, T, D = q.shape
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, fracs))
    dfrac = "dfrac" if fracs.requires_grad else ""  # every column reads two rows, and d/dfrac
    cls = autotune.shape_class(
        q.device, q.dtype, grad=grad, bh=B * H, t=T, d=D, c=len(dists), variant=dfrac
    )
    rows = autotune.timing_rows(B, H, q.device)
    runs = {name: _timed_run(name, grad, rows, *call) for name in names}
    return autotune.choose("columns_attention", cls, runs)


def _timed_run(name: str, grad: bool, rows: int, q, k, v, dists, fracs, scale, interpolated):
    """A zero-argument callable running implementation `name` once on the first `rows` batch
    rows of the call's tensors, detached (no random draw: a run's random stream does not depend
    on whether the choice was cached), with the backward of out.sum() when `grad`.  Nothing
    is built until it is called: a cached choice costs no tensor work."""

    def run():
        leaves = [t.detach()[:rows].requires_grad_(t.requires_grad) for t in (q, k, v)]
        leaves.append(fracs.detach().requires_grad_(fracs.requires_grad))
        out = _run(name, leaves[0], leaves[1], leaves[2], dists, leaves[3], scale, interpolated)
        if grad:
            wrt = [t for t in leaves if t.requires_grad]
            torch.autograd.grad(out.sum(), wrt)

    return run


def _run(which: str, q, k, v, dists, fracs, scale, interpolated) -> torch.Tensor:
    if which == "cpp":
        return cpu.cpp_columns_attention(q, k, v, dists, fracs, scale, interpolated=interpolated)
    if which == "triton":
        return _triton_module().triton_columns_attention(
            q, k, v, dists, fracs, scale, interpolated=interpolated
        )
    fracs = fracs.to(q.dtype)  # the PyTorch-level paths blend rows in q's dtype
    if which == "flex":
        return flex.flex_columns_attention(q, k, v, dists, fracs, scale, interpolated=interpolated)
    return columns_attention_reference(q, k, v, dists, fracs, scale, interpolated=interpolated)


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
    which = resolve(impl, q.device, q.dtype, call=(q, k, v, dists, fracs, scale, interpolated))
    chosen = impl == "auto" and not os.environ.get(ENV, "").strip()
    if which != "triton" or not chosen:
        return _run(which, q, k, v, dists, fracs, scale, interpolated)
    try:  # 'auto' chose Triton: an error must not reach the user's run
        return _run(which, q, k, v, dists, fracs, scale, interpolated)
    except torch.OutOfMemoryError:
        raise  # the PyTorch path needs more memory, not less
    except Exception as err:
        if not selfcheck.can_check():
            raise
        selfcheck.record_failure(q.device, q.dtype, err)
        return _run("torch", q, k, v, dists, fracs, scale, interpolated)
