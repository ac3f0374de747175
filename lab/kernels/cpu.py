"""The fused CPU kernel for column attention: a C++ extension behind a PyTorch custom op.

    cpp_columns_attention(q, k, v, dists, fracs, scale, *, interpolated=None) -> (B, H, T, D)

computes, for every query t, one softmax over C columns; column c reads distance lo_c =
dists[c] (masked for t < lo_c) and, with f = fracs[c], the key/value blend
(1 − f)·row[t − lo_c] + f·row[max(t − lo_c − 1, 0)] — the math of `lab.sparse.attention`'s
`lab.kernels.reference.ShiftedAttention`, which stays the reference.  Shapes (GQA, query head h reads KV head
h // (H/KV)): q (B, H, T, D); k, v (B, KV, T, D).  Differentiable in q, k, v and fracs.

The C++ sources (``csrc/columns_attention.cpp``, the binding, and ``csrc/columns_kernel.h``,
the kernels) are compiled on first use with
`torch.utils.cpp_extension.load` (-O3 -march=native, OpenMP through PyTorch's at::parallel_for)
and cached under TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions).  The cache entry's
name carries a hash of the source, the flags, the torch version and this CPU's model and
feature flags, so a build made for one CPU is never loaded on another.  Compilation failures
are remembered for the process: `load()` raises `KernelUnavailable` with the reason.
``FIBLAB_CPU_MARCH=x86-64-v3`` (any gcc ``-march``) builds for that instruction set instead of
this CPU's: one build for a cluster of mixed CPUs, and how the suite checks the AVX2 build
against the float64 oracle on an AVX-512 machine (tests/lab/test_kernels.py).

Autograd: two `torch.library.custom_op`s (``fiblab::cpu_columns_fwd`` / ``_bwd``, wrapping the
extension's ``torch.ops.fiblab_cpu.forward`` / ``backward``) with `register_autograd` and fake
(meta) kernels, so the op composes with the rest of the model and with torch.compile.  The
forward saves q, k, v and the probabilities P (B, H, T, C); the backward needs only per-task
halo rows (at most B·KV·T·D·2 values) for its scatter — and dS (B, H, T, C) on the generic
path (float64, or head dims / group sizes the vectorised kernels do not cover).  Memory is
O(B·H·T·C) beyond the inputs, outputs and gradients; no gathered (T, C, D) keys exist.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import sys
import threading
from collections.abc import Sequence

import torch

from lab.kernels.shapes import check_columns
from lab.util.files import exclusive_lock

CSRC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")
SOURCES = (
    os.path.join(CSRC_DIR, "columns_attention.cpp"),  # the binding (compiled)
    os.path.join(CSRC_DIR, "columns_kernel.h"),  # the kernels (included)
    os.path.join(CSRC_DIR, "blur_band.h"),
)  # the blur probe's band kernels
_NATIVE_FLAGS = ["-O3", "-march=native", "-fopenmp"]
_PORTABLE_FLAGS = ["-O3", "-fopenmp"]
MARCH_ENV = "FIBLAB_CPU_MARCH"  # build for this -march instead of native (e.g. x86-64-v3: AVX2)
DTYPES = (torch.float32, torch.float64, torch.bfloat16)  # bfloat16: float32 inside
# how a build folder is entered (`_one_builder`); in the cache name, so a process running older
# code (a notebook kernel from before a pull) never shares a folder with one that takes the flock
LOADER = "flock-1"


class KernelUnavailable(RuntimeError):
    """The C++ extension cannot be built or loaded here (the message says why)."""


# --------------------------------------------------------------------------------------------
# build and load (once per process; the build itself is cached on disk)
# --------------------------------------------------------------------------------------------
def cpu_signature() -> str:
    """A string that identifies this CPU's model and instruction-set features."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        fields = {}
        for line in text.split("\n\n")[0].splitlines():
            key, _, val = line.partition(":")
            fields[key.strip()] = val.strip()
        return " ".join(
            fields.get(k, "") for k in ("vendor_id", "model name", "flags", "Features", "CPU part")
        )
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


def extension_name(flags: Sequence[str]) -> str:
    """Cache name for the extension built with `flags` on this CPU and torch version, from
    this checkout's sources: torch's loader rebuilds an entry whose sources moved, so two
    checkouts sharing one name (worktrees, a clone beside the dev tree) rebuilt each other's."""
    h = hashlib.sha256()
    srcs = []
    for path in SOURCES:
        with open(path, "rb") as f:
            srcs.append(f.read())
    for part in (
        *srcs,
        " ".join(flags).encode(),
        torch.__version__.encode(),
        cpu_signature().encode(),
        sys.version.encode(),
        CSRC_DIR.encode(),
        LOADER.encode(),
    ):
        h.update(part)
        h.update(b"\0")
    return f"fiblab_cpu_{h.hexdigest()[:16]}"


def _cache_file(flags: Sequence[str]) -> str | None:
    """Where the build with ``flags`` lives in torch's extension cache (None: cannot tell)."""
    from torch.utils import cpp_extension

    name = extension_name(flags)
    try:
        return os.path.join(cpp_extension._get_build_directory(name, False), f"{name}.so")
    except Exception:  # private helper: best effort only
        return None


def is_cached() -> bool:
    """Whether the kernel is built already (loaded in this process, or this machine's native
    build in the cache): its first use then costs no compilation, and progress lines need not
    announce one."""
    if "module" in _STATE:
        return True
    path = _cache_file(_NATIVE_FLAGS)
    return bool(path) and os.path.exists(path)


def _compile(flags: Sequence[str]):
    """Build (or reuse the cached build of) the extension with `flags`, load it into this
    process and return its operator namespace, ``torch.ops.fiblab_cpu``."""
    from torch.utils import cpp_extension

    name = extension_name(flags)
    path = _cache_file(flags)
    build_dir = os.path.dirname(path) if path else None
    if not (path and os.path.exists(path)):
        print(
            f"fiblab: compiling the CPU attention kernel ({' '.join(flags)}) into "
            f"{build_dir or 'TORCH_EXTENSIONS_DIR'} — once, then cached",
            file=sys.stderr,
            flush=True,
        )
    with _one_builder(build_dir):
        cpp_extension.load(
            name=name,
            sources=[SOURCES[0]],
            extra_cflags=list(flags),
            extra_ldflags=["-fopenmp"],
            extra_include_paths=[CSRC_DIR],
            is_python_module=False,
            verbose=False,
        )
    return torch.ops.fiblab_cpu


@contextlib.contextmanager
def _one_builder(build_dir: str | None):
    """One process at a time in torch's loader for this build, by a lock the OS drops when its
    holder dies (`fcntl.flock`), and torch's own lock file cleared under it.

    Why: torch's loader marks a build by creating ``<build_dir>/lock`` and makes every other
    process wait while that file exists — for ever when its maker was killed mid-compile (a run
    stopped while its log said "compiling"); every later run, grid and probe of the checkout then
    sat at "starting".  Holding the flock, no process of the lab is inside the loader for this
    build (every one takes it: `LOADER` in the cache name keeps a process of older code out of
    this folder), so a ``lock`` found there is stale.  An extensions folder shared between nodes
    needs a file system whose flock reaches across them (NFS with ``local_lock=flock`` does not)."""
    if build_dir is None:
        yield
        return
    waiting = f"fiblab: waiting for another process's build of the kernel in {build_dir}"
    with exclusive_lock(os.path.join(build_dir, "fiblab.flock"), waiting) as held:
        if held:  # without the flock, torch's lock file may be a live builder's: left alone
            stale = os.path.join(build_dir, "lock")
            with contextlib.suppress(FileNotFoundError):
                os.remove(stale)
                print(f"fiblab: removed {stale}, left by a build that was stopped",
                      file=sys.stderr, flush=True)  # fmt: skip
        yield


def _build():
    """The extension's operators: native flags first, then portable ones if the compiler
    refuses them."""
    march = os.environ.get(MARCH_ENV, "").strip()
    if march:  # asked for: no fallback, a failure says so
        flags = ["-O3", f"-march={march}", "-fopenmp"]
        ops, _STATE["flags"] = _compile(flags), tuple(flags)
        return ops
    try:
        ops, _STATE["flags"] = _compile(_NATIVE_FLAGS), tuple(_NATIVE_FLAGS)
    except Exception as native_err:  # e.g. a compiler without -march=native
        try:
            ops, _STATE["flags"] = _compile(_PORTABLE_FLAGS), tuple(_PORTABLE_FLAGS)
        except Exception:
            raise native_err from None
    return ops


_STATE: dict = {}
_LOCK = threading.Lock()


def load():
    """The compiled extension's operators (``torch.ops.fiblab_cpu``).  Raises
    `KernelUnavailable` (and remembers it for the process) when it cannot be built — e.g. no
    C++ compiler or no ninja.  Tests simulate that by replacing `_build`."""
    with _LOCK:
        if "module" in _STATE:
            return _STATE["module"]
        if "error" in _STATE:
            raise KernelUnavailable(_STATE["error"])
        try:
            _STATE["module"] = _build()
        except Exception as err:  # compiler missing, build failed, …
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            _STATE["error"] = f"the C++ extension could not be built: {first[:300]}"
            raise KernelUnavailable(_STATE["error"]) from err
        return _STATE["module"]


def status() -> bool | str:
    """True when the kernel is usable here, else the reason (builds it on first call)."""
    try:
        load()
        return True
    except KernelUnavailable as err:
        return str(err)


def build_info() -> dict:
    """How the kernel was built here: {"ok", "flags", "name", "reason"} (builds it if needed).
    ``name`` is the cache entry, whose hash covers this CPU's model and ISA flags."""
    ok = status()
    flags = _STATE.get("flags")
    return {
        "ok": ok is True,
        "flags": list(flags) if flags else None,
        "name": extension_name(flags) if flags else None,
        "reason": None if ok is True else ok,
    }


# --------------------------------------------------------------------------------------------
# the custom ops
# --------------------------------------------------------------------------------------------
Tensor = torch.Tensor


@torch.library.custom_op("fiblab::cpu_columns_fwd", mutates_args=(), device_types="cpu")
def _fwd_op(
    q: Tensor, k: Tensor, v: Tensor, dists: Tensor, fracs: Tensor, grad_cols: Tensor, scale: float
) -> tuple[Tensor, Tensor]:
    """(out (B,H,T,D), P (B,H,T,C)).  grad_cols is only kept for the backward."""
    out, probs = load().forward(q, k, v, dists, fracs, scale)
    return out, probs


@_fwd_op.register_fake
def _(q, k, v, dists, fracs, grad_cols, scale):
    B, H, T, _ = q.shape
    p_dtype = torch.float32 if q.dtype == torch.bfloat16 else q.dtype  # P: float32 for bf16
    return torch.empty_like(q), q.new_empty(B, H, T, dists.shape[0], dtype=p_dtype)


@torch.library.custom_op("fiblab::cpu_columns_bwd", mutates_args=(), device_types="cpu")
def _bwd_op(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    probs: Tensor,
    dists: Tensor,
    fracs: Tensor,
    grad_cols: Tensor,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dfracs); dfracs is computed for the columns grad_cols marks (empty: none)."""
    dq, dk, dv, dfracs = load().backward(dout, q, k, v, probs, dists, fracs, grad_cols, scale)
    return dq, dk, dv, dfracs


@_bwd_op.register_fake
def _(dout, q, k, v, probs, dists, fracs, grad_cols, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(fracs)


def _setup_context(ctx, inputs, output):
    q, k, v, dists, fracs, grad_cols, scale = inputs
    ctx.save_for_backward(q, k, v, dists, fracs, grad_cols, output[1])
    ctx.scale = scale
    ctx.set_materialize_grads(False)  # P's gradient is never used


def _backward(ctx, dout, _dprobs):
    q, k, v, dists, fracs, grad_cols, probs = ctx.saved_tensors
    if dout is None:
        return None, None, None, None, None, None, None
    want_frac = ctx.needs_input_grad[4]
    cols = grad_cols if want_frac else grad_cols.new_zeros(0)
    dq, dk, dv, dfracs = _bwd_op(dout, q, k, v, probs, dists, fracs, cols, ctx.scale)
    return dq, dk, dv, None, dfracs if want_frac else None, None, None


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


# --------------------------------------------------------------------------------------------
# public entry point
# --------------------------------------------------------------------------------------------
def cpp_columns_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dists: Tensor,
    fracs: Tensor,
    scale: float,
    *,
    interpolated: Tensor | Sequence[bool] | None = None,
) -> Tensor:
    """Column attention with the fused C++ kernel.  Returns (B, H, T, D).

    q (B, H, T, D); k, v (B, KV, T, D), float32, float64 or bfloat16 (computed in float32,
    the result rounded to bfloat16 once) on CPU; dists (C,) int64 ≥ 0;
    fracs (C,) float (0 for integer columns), differentiable — the gradient to α.
    interpolated  bool (C,): the columns that may read a second row and get d/dfrac.  Default:
                  every column when fracs requires grad, else those with f ≠ 0.  A column not
                  marked must have f = 0; its dfrac is 0.  Marking only the rungs (not the
                  window) saves the second-row work where no gradient is wanted.
    """
    check_columns(q, k, v, dists, fracs, scale)
    if q.device.type != "cpu" or k.device.type != "cpu" or v.device.type != "cpu":
        raise ValueError(
            f"the C++ kernel runs on CPU tensors; got q on {q.device}: use "
            f"impl='triton' or 'torch' for other devices"
        )
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        raise ValueError(
            f"the C++ kernel needs q, k, v in one of float32 / float64 / bfloat16; got "
            f"{q.dtype}, {k.dtype}, {v.dtype}: cast them, or use impl='torch'"
        )
    C = dists.numel()
    fr = fracs.to(device="cpu", dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
    host = fracs.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(host).all()):
        raise ValueError(f"fracs must be finite; got {host.tolist()}")
    d = dists.detach().to("cpu", torch.int64)
    if int(d.min()) < 0:
        raise ValueError(f"dists must be >= 0 (a query reads only the past); got {d.tolist()}")
    if interpolated is None:
        cols = torch.ones(C, dtype=torch.bool) if fracs.requires_grad else host != 0
    else:
        cols = torch.as_tensor(interpolated).to("cpu")
        if cols.shape != (C,) or cols.dtype != torch.bool:
            raise ValueError(
                f"interpolated must be a bool mask of shape ({C},); got "
                f"{cols.dtype} {tuple(cols.shape)}"
            )
        bad = ((host != 0) & ~cols).nonzero().flatten().tolist()
        if bad:
            raise ValueError(
                f"columns {bad} have non-zero fracs {host[bad].tolist()} but are not "
                f"marked interpolated: mark them, or pass fracs 0 there"
            )
    out, _ = _fwd_op(q, k, v, d, fr, cols, float(scale))
    return out
