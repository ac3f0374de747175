"""Compute precision: the names, the choice that follows the device, and the autocast context.

    PRECISIONS = ("fp32", "bf16")            # what a run computes in (stored with its results)
    PRECISION_CHOICES = ("auto", "fp32", "bf16")   # what a user may ask for
    resolve_precision("auto", device)        # "bf16" on CUDA, "fp32" on every CPU
    with autocast(device, precision): ...

``"bf16"``   bfloat16 autocast on the device's type (weights and optimizer stay float32)
``"fp32"``   autocast switched *off* on the device's type: float32 even inside an outer autocast
``"auto"``   `resolve_precision`: bf16 on CUDA, fp32 on every CPU.  Why not bf16 on CPUs with
             native bf16 units (AVX512-BF16, AMX)?  Measured, it is slower there for every
             workload of the lab: on a Xeon with AVX512-BF16 the training step of the CPU
             models is 1.5–2.0× and of the paper's 60M model 1.1–1.6× *slower* under bf16
             autocast, the probe step 1.3–1.5×, the evaluation 2.1–2.5× (the models are small, so
             the casts cost more than the faster matmuls save, and the fused C++ attention
             kernel is float32 / float64) — benchmarks/precision_speed.py, RESULTS.md "One lab
             on every CPU".  On an AVX2 CPU bf16 is emulated, ≈ 20× slower.  And bf16 changes
             the numbers: with fp32 on every CPU the same command gives the same results on
             the AVX2 and the AVX512-BF16 machines the lab runs on.  ``--precision bf16``
             opts in (it warns once where the CPU has no bf16 units:
             `lab.machine.hardware.native_bf16`).
``None``     inherit: inside an enclosing `autocast(device, p)` of the lab nothing is entered (so
             a run's evaluation computes in the precision its training chose); elsewhere the
             device's default, `default_precision(device)` (= ``auto``), and where that is fp32
             nothing is entered, so an autocast the caller opened stays in force

Results are keyed by the *resolved* precision (probe cell keys, a run's provenance), so a run
never resumes or averages across precisions by mistake: resolve before keying.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings

import torch

from lab.machine.hardware import machine, native_bf16

PRECISIONS = ("fp32", "bf16")
PRECISION_CHOICES = ("auto", *PRECISIONS)
_WARNED: set[str] = set()
# the precision of the innermost enclosing `autocast(device, p)` with p given: {device type: p}
_ENCLOSING: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("fiblab_precision")


def check_precision(precision: str) -> str:
    """`precision` when it is one of PRECISIONS, else a ValueError naming the choices."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} must be one of {PRECISIONS}")
    return precision


def default_precision(device: torch.device | str) -> str:
    """The precision `auto` picks on `device`: "bf16" on CUDA, "fp32" on every CPU, native
    bf16 units or not (measured slower there for the lab's models: the module docstring)."""
    return "bf16" if torch.device(device).type == "cuda" else "fp32"


def slow_bf16_reason(device: torch.device | str) -> str | None:
    """Why bf16 is expected to be slow on `device` (None where it is native or not a CPU)."""
    if torch.device(device).type != "cpu" or native_bf16(device):
        return None
    m = machine()
    return (
        f"this CPU ({m.cpu_model}, PyTorch capability {m.capability}) has no native bfloat16 "
        f"matrix units (AVX512-BF16 / AMX), so PyTorch emulates bf16 and a probe step is "
        f"expected to be ≈ 20× slower than in fp32; use --precision auto (fp32 on a CPU)"
    )


def resolve_precision(precision: str | None, device: torch.device | str) -> str:
    """The precision a run on `device` computes in: "auto" / None → `default_precision`; a
    forced "bf16" on a CPU without native bf16 is kept, with one warning a process."""
    if precision in (None, "auto"):
        return default_precision(device)
    if precision not in PRECISION_CHOICES:
        raise ValueError(f"precision={precision!r} must be one of {PRECISION_CHOICES}")
    if precision == "bf16":
        reason = slow_bf16_reason(device)
        if reason is not None and "bf16" not in _WARNED:
            _WARNED.add("bf16")
            warnings.warn(f"fiblab: bf16 on CPU: {reason}", RuntimeWarning, stacklevel=2)
    return precision


def describe_auto(device: torch.device | str = "cpu") -> str:
    """A label for a precision menu: "auto (fp32 on this CPU)", "auto (bf16 on CUDA)"."""
    kind = torch.device(device).type
    where = "this CPU" if kind == "cpu" else kind.upper()
    return f"auto ({default_precision(device)} on {where})"


def autocast(device: torch.device | str, precision: str | None = None):
    """The context for computing on `device` in `precision` (see the module docstring)."""
    dev = torch.device(device).type
    if precision is None and dev in _ENCLOSING.get({}):
        return contextlib.nullcontext()  # an enclosing lab autocast already chose
    if precision in (None, "auto"):
        if default_precision(dev) == "fp32" and precision is None:
            return contextlib.nullcontext()
        precision = default_precision(dev)
    if check_precision(precision) == "bf16":
        return _Autocast(precision, dev, dtype=torch.bfloat16)
    return _Autocast(precision, dev, enabled=False)


class _Autocast(torch.autocast):
    """`torch.autocast` that records its precision as the enclosing one for its device type
    while active, so that `autocast(device)` (precision None) inside it enters nothing."""

    def __init__(self, precision: str, device_type: str, **kwargs):
        super().__init__(device_type, **kwargs)
        self._precision = precision
        self._tokens: list = []

    def __enter__(self):
        self._tokens.append(_ENCLOSING.set({**_ENCLOSING.get({}), self.device: self._precision}))
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _ENCLOSING.reset(self._tokens.pop())
