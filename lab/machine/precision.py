"""Compute precision: the names, the choice that follows the device, and the autocast context.

    PRECISIONS = ("fp32", "bf16")            # what a run computes in (stored with its results)
    PRECISION_CHOICES = ("auto", "fp32", "bf16")   # what a user may ask for
    resolve_precision("auto", device, workload)   # bf16 on CUDA; a CPU: fp32 unless measured
    with autocast(device, precision): ...

``"bf16"``   bfloat16 autocast on the device's type (weights and optimizer stay float32)
``"fp32"``   autocast switched *off* on the device's type: float32 even inside an outer autocast
``"auto"``   `resolve_precision`: bf16 on CUDA; on a CPU, fp32 unless a measurement on this
             machine says otherwise (`auto_precision`).  Why measure?  The same workload went
             opposite ways on the lab's CPUs: on a Xeon with AVX512-BF16 the training steps
             were 1.1–2.0× *slower* under bf16 autocast (the models are small, the casts cost
             more than the faster matmuls save), on a Zen 5 with AVX512-BF16 the 60M model's
             step was 0.40–0.53× fp32's (benchmarks/precision_speed.py; RESULTS.md).  So a CPU
             with native bf16 units runs a workload class in bf16 only where `fiblab doctor`
             (`record_precision`) measured it faster on this machine, not under load, with the
             quality check held (one batch's loss within `QUALITY_NATS` of fp32's); every
             other case is fp32, and `auto_precision` says why.  On an AVX2 CPU bf16 is
             emulated, ≈ 20× slower: never chosen.  Comparisons that must match committed
             results (the study, the confirmation) pin fp32 explicitly.  ``--precision bf16``
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


#: The autotune op under which a workload class's precision measurement is kept.
#: the autotune op of precision decisions; "-v2" since the fused CPU kernel takes bf16 (sparse
#: steps under bf16 sped up ≈ 1.8×), so no measurement of the older kernel decides today's
PRECISION_OP = "precision-v2"
#: The quality check: one batch's loss under bf16 within this of fp32's (nats).  The lab
#: measured bf16's effect on held-out perplexity at ≤ 0.01 σ of the seeds (≈ 0.0001 nats);
#: a forward's rounding differs by ~1e-3 on the lab's models, far below this.
QUALITY_NATS = 0.01
#: bf16 is chosen only when its step is at most this fraction of fp32's (noise margin).
FASTER = 0.95


def auto_precision(device: torch.device | str, workload: str | None = None) -> tuple[str, str]:
    """(the precision ``auto`` picks on `device` for `workload`, why) — see the module
    docstring.  `workload` is a class name (`lab.training` names an LM step's, e.g.
    ``lm-train|L4|d128|T128|sparse``); without one a CPU computes in fp32."""
    if torch.device(device).type == "cuda":
        return "bf16", "bf16 on CUDA"
    if not native_bf16(device):
        return "fp32", "fp32: this CPU has no native bf16 units (bf16 is emulated, ≈ 20× slower)"
    if workload is None:
        return "fp32", "fp32: no workload class named, so no measurement to go by"
    from lab.machine import autotune

    d = autotune.lookup(PRECISION_OP, workload)
    if d is None:
        return "fp32", f"fp32: {workload} not measured on this CPU (fiblab doctor measures it)"
    times = ", ".join(f"{k} {v:.0f} ms" for k, v in d.timings_ms.items())
    if d.busy:
        return "fp32", f"fp32: {workload} was measured under load ({times}): re-measure quietly"
    if not d.checks.get("quality_ok", False):
        delta = d.checks.get("quality_delta")
        return "fp32", f"fp32: bf16's loss differed from fp32's by {delta} nats (> {QUALITY_NATS})"
    if d.choice != "bf16":
        return "fp32", f"fp32: measured faster than bf16 for {workload} ({times})"
    return "bf16", f"bf16: measured faster for {workload} ({times}), quality check held"


def record_precision(
    workload: str, fp32_s: float, bf16_s: float, quality_delta: float, other_cores: float | None
):
    """Keep a precision measurement of `workload` on this machine (the fastest step of each,
    the loss difference of the quality check, other processes' load meanwhile): the decision
    `auto_precision` reads.  Returns it."""
    from datetime import datetime, timezone

    from lab.machine import autotune

    ok = abs(quality_delta) <= QUALITY_NATS
    choice = "bf16" if ok and bf16_s <= FASTER * fp32_s else "fp32"
    d = autotune.Decision(
        op=PRECISION_OP,
        shape_class=workload,
        choice=choice,
        candidates=PRECISIONS,
        timings_ms={"fp32": fp32_s * 1e3, "bf16": bf16_s * 1e3},
        machine_key=machine().key,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        other_cores=None if other_cores is None else round(float(other_cores), 3),
        checks={"quality_delta": float(quality_delta), "quality_ok": ok},
    )
    autotune.record(d)
    return d


def workload_class(
    kind: str, layers: int, d_model: int, seq_len: int, batch: int, attention: str
) -> str:
    """The class one precision measurement serves, e.g. ``lm-train|L4|d128|T128|B32|sparse``:
    the step's kind and the shape that sets its matmuls' sizes (the batch rounded up to a
    power of two), so a measurement of the demo's model never decides the 60M model's."""
    b = 1 << max(int(batch) - 1, 0).bit_length()
    return f"{kind}|L{int(layers)}|d{int(d_model)}|T{int(seq_len)}|B{b}|{attention}"


def default_precision(device: torch.device | str, workload: str | None = None) -> str:
    """The precision `auto` picks on `device` (`auto_precision`, without the why)."""
    return auto_precision(device, workload)[0]


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


def resolve_precision(
    precision: str | None, device: torch.device | str, workload: str | None = None
) -> str:
    """The precision a run on `device` computes in: "auto" / None → `default_precision` (for
    `workload` where the caller names its class); a forced "bf16" on a CPU without native
    bf16 is kept, with one warning a process."""
    if precision in (None, "auto"):
        return default_precision(device, workload)
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
