"""The Triton kernel's first-use check: ``impl="auto"`` trusts it only after it agrees with the
pure-PyTorch path in this process.

The Triton kernel is the default on CUDA, but a compiler, driver or GPU the lab never ran on can
make it fail or (worse) return wrong numbers.  So before ``auto`` first hands it a user's tensors
on a (device, dtype), `verdict` runs it and `lab.kernels.reference` on one small seeded problem —
integer columns and interpolated (learned-α) columns, forward and backward (dq, dk, dv, and dfracs,
the gradient that reaches α) — and compares them (the reference in float64 on the same
dtype-rounded inputs).  An exception, a non-finite value or an error above `TOL` fails the check;
the verdict is kept for the process, and a failure warns once, in one line naming the reason, after
which ``auto`` uses the PyTorch path.  A Triton call that raises later, under ``auto``, is recorded
as a failure the same way (`record_failure`) and that call is re-run on the PyTorch path.

A forced ``impl="triton"`` (or ``FIBLAB_ATTN_IMPL=triton``) is never checked: the user asked for
it.  While ``torch.compile`` traces, or on fake tensors, the check cannot run: ``auto`` then uses
the PyTorch path unless a verdict exists (one eager call, or `verdict`, settles it first).

This module receives the kernel as a callable: it knows nothing of Triton, or of plans.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from lab.kernels.reference import columns_attention_reference

# the small problem: GQA 2, a head dim that is not a power of two, T not a multiple of a block
SHAPE = dict(B=1, H=4, KV=2, T=67, D=24)
DISTS = (0, 1, 2, 3, 4, 6, 10, 16, 26, 42)  # a window {0..4} and rungs α·f, α ≈ 2
FRACS = (0.0, 0.0, 0.0, 0.0, 0.0, 0.25, 0.6, 0.1, 0.75, 0.4)  # the rungs' α·f − lo
SEED = 1234
TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 3e-2}  # max |err| / max |ref|


@dataclass(frozen=True)
class Verdict:
    """The outcome of one kernel's check on one (device, dtype)."""

    ok: bool
    device: str
    dtype: str
    reason: str = ""  # one line when not ok
    errors: dict[str, float] = field(default_factory=dict)  # "learned/dq": relative error


_VERDICTS: dict[tuple[str, str], Verdict] = {}
_WARNED: set[str] = set()


def _key(device: torch.device | str, dtype: torch.dtype) -> tuple[str, str]:
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    return str(dev), str(dtype).removeprefix("torch.")


def can_check() -> bool:
    """False while torch.compile / jit traces (the check needs eager, real tensors)."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    try:  # under a fake-tensor mode, new tensors are fake too
        from torch._guards import detect_fake_mode  # private, but the one way to ask

        return detect_fake_mode() is None
    except Exception:
        return True


def cached(device: torch.device | str, dtype: torch.dtype) -> Verdict | None:
    """This process's verdict for (device, dtype), or None before the check."""
    return _VERDICTS.get(_key(device, dtype))


def verdicts() -> list[Verdict]:
    """Every verdict this process reached (for reports such as gpu_check)."""
    return list(_VERDICTS.values())


def reset() -> None:
    """Forget every verdict and warning (tests; a new driver in the same process)."""
    _VERDICTS.clear()
    _WARNED.clear()


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _warn(v: Verdict, name: str) -> None:
    if name in _WARNED:
        return
    _WARNED.add(name)
    warnings.warn(
        f"fiblab: the {name} attention kernel failed its check on {v.device} {v.dtype} "
        f"({v.reason}); using the pure-PyTorch path for this process",
        RuntimeWarning,
        stacklevel=5,
    )


def _rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.detach().double(), ref.detach().double()
    if got.shape != ref.shape:
        return float("inf")
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    s = float(ref.abs().max())
    e = float((got - ref).abs().max())
    return e / s if s > 0 else e


def compare(run: Callable, device: torch.device | str, dtype: torch.dtype) -> dict[str, float]:
    """Relative errors {"int/out", "int/dq", …, "learned/dfracs"} of `run` (the kernel under
    test, called as ``run(q, k, v, dists, fracs, scale, interpolated)``) against the PyTorch
    reference in float64 on the same `dtype`-rounded inputs.  Exceptions propagate."""
    B, H, KV, T, D = (SHAPE[n] for n in ("B", "H", "KV", "T", "D"))
    g = torch.Generator(device="cpu").manual_seed(SEED)
    base = [torch.randn(B, n, T, D, generator=g) for n in (H, KV, KV)]  # q, k, v (float32)
    go = torch.randn(B, H, T, D, generator=g)
    scale = D**-0.5
    dists = torch.tensor(DISTS, dtype=torch.int64)
    errs: dict[str, float] = {}
    for mode in ("int", "learned"):
        learned = mode == "learned"
        interp = torch.tensor([learned and f != 0 for f in FRACS], dtype=torch.bool)
        fr = torch.tensor(FRACS if learned else [0.0] * len(FRACS), dtype=torch.float64)
        results = []
        for dt in (dtype, torch.float64):  # the kernel, then the reference
            q, k, v = (x.to(device, dtype).to(dt).requires_grad_() for x in base)
            fracs = fr.to(device, dtype).to(dt).requires_grad_(learned)  # as plans pass them
            fn = run if dt is dtype else columns_attention_reference
            if dt is dtype:
                out = fn(q, k, v, dists, fracs, scale, interp)
            else:
                out = fn(q, k, v, dists, fracs, scale, interpolated=interp)
            leaves = [q, k, v] + ([fracs] if learned else [])
            grads = torch.autograd.grad(out, leaves, go.to(device, dtype).to(dt))
            results.append([out, *grads])
        names = ["out", "dq", "dk", "dv", "dfracs"]
        for n, got, ref in zip(names, *results):
            errs[f"{mode}/{n}"] = _rel(got, ref)
    return errs


def check(run: Callable, device: torch.device | str, dtype: torch.dtype) -> Verdict:
    """Run the comparison once and judge it (no caching, no warning)."""
    dev, dt = _key(device, dtype)
    tol = TOL.get(dtype, 1e-4)
    try:
        errs = compare(run, device, dtype)
    except Exception as e:
        return Verdict(False, dev, dt, _one_line(f"{type(e).__name__}: {e}"))
    bad = {n: e for n, e in errs.items() if not e <= tol}  # NaN fails too
    if not bad:
        return Verdict(True, dev, dt, "", errs)
    n, e = next(iter(bad.items()))  # the first in the check's order: forward, then backward
    mode, what = n.split("/")
    reason = (
        f"{what} of the {'learned' if mode == 'learned' else 'integer'}-α problem differs from "
        f"the PyTorch path by {e:.1e} > {tol:.0e}"
    )
    return Verdict(False, dev, dt, reason, errs)


def verdict(
    run: Callable, device: torch.device | str, dtype: torch.dtype, name: str = "triton"
) -> Verdict:
    """The cached verdict for (device, dtype), checking `run` first if there is none; a failed
    check warns once per process, in one line."""
    key = _key(device, dtype)
    v = _VERDICTS.get(key)
    if v is None:
        v = _VERDICTS[key] = check(run, device, dtype)
        if not v.ok:
            _warn(v, name)
    return v


def record_failure(
    device: torch.device | str, dtype: torch.dtype, error: BaseException, name: str = "triton"
) -> Verdict:
    """A kernel call that raised after its check passed: a failed verdict from now on."""
    dev, dt = _key(device, dtype)
    v = Verdict(False, dev, dt, _one_line(f"{type(error).__name__}: {error}"))
    _VERDICTS[(dev, dt)] = v
    _warn(v, name)
    return v
