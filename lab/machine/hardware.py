"""What machine this is: the facts every speed choice of the lab follows.

    m = machine()            # Machine: cpu model, PyTorch capability, bf16/AMX flags, cores, GPU
    native_bf16("cpu")       # True where bfloat16 matmuls run on native units (CUDA, AVX512-BF16, AMX)
    m.line()                 # "AMD EPYC · capability AVX2 · no native bf16 · 2 cores, 2 threads · torch 2.13.0+cpu"

Why it matters: on a CPU without bfloat16 matrix units PyTorch emulates bf16 matmuls, and the
probe step under bf16 autocast is measured ≈ 20× *slower* than in float32 on such a CPU (an
AVX2 AMD EPYC: benchmarks/RESULTS.md), so a forced ``--precision bf16`` there warns
(`lab.machine.precision.slow_bf16_reason` reads `native_bf16`); the measured implementation choices
(`lab.machine.autotune`) are cached under `Machine.key`, and every benchmark table names the machine it
was measured on (`Machine.line`).  (On a CPU ``auto`` is bf16 only where it was measured faster for
the workload: see `lab.machine.precision`.)

The CPU's features come from PyTorch's own probes (`torch.backends.cpu.get_cpu_capability`,
``torch.cpu._is_avx512_bf16_supported`` / ``_is_amx_tile_supported``, which read CPUID) and, for
ARM (the ``bf16`` feature of ARMv8.6), from /proc/cpuinfo.  ``FIBLAB_CPU_BF16=0|1`` overrides the
answer (a CPU the probes misread; tests).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from dataclasses import asdict, dataclass

import torch

from lab.machine.cpu_share import cores

BF16_ENV = "FIBLAB_CPU_BF16"


@dataclass(frozen=True)
class Machine:
    """This process's machine, as the lab's speed choices see it."""

    cpu_model: str  # "AMD EPYC", "Intel(R) Xeon(R) Platinum 8480+", …
    capability: str  # PyTorch's CPU capability: "DEFAULT", "AVX2", "AVX512", "SVE256", …
    avx512_bf16: bool  # AVX512-BF16 dot products
    amx: bool  # AMX tiles (AMX-BF16 matrix units)
    arm_bf16: bool  # ARMv8.6 BF16 instructions
    cores: int  # CPUs this process may run on (sched_getaffinity)
    threads: int  # torch's intra-op threads
    torch: str
    cuda: str | None  # the CUDA runtime torch was built with, when a GPU is usable
    gpu: str | None  # name of CUDA device 0, when one is usable

    @property
    def cpu_bf16(self) -> bool:
        """True when this CPU has native bfloat16 matrix instructions (or FIBLAB_CPU_BF16=1)."""
        return _bf16(self.avx512_bf16, self.amx, self.arm_bf16)

    @property
    def key(self) -> str:
        """A short hash of what decides speed (CPU, features, threads, torch, GPU): cached
        measurements made under one key are never reused under another."""
        text = repr(
            (self.cpu_model, self.capability, self.cpu_bf16, self.threads, self.torch, self.gpu)
        )
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def line(self) -> str:
        """One line naming the machine, for benchmark output and RESULTS tables."""
        bf16 = "native bf16" if self.cpu_bf16 else "no native bf16"
        feats = [n for n, on in (("AVX512-BF16", self.avx512_bf16), ("AMX", self.amx)) if on]
        gpu = f" · GPU {self.gpu} (CUDA {self.cuda})" if self.gpu else ""
        threads = f"{self.threads} thread{'' if self.threads == 1 else 's'}"
        return (
            f"{self.cpu_model} · capability {self.capability}"
            f"{' + ' + ' + '.join(feats) if feats else ''} · {bf16} · {self.cores} cores, "
            f"{threads} · torch {self.torch}{gpu}"
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "cpu_bf16": self.cpu_bf16, "key": self.key}


def _bf16(avx512_bf16: bool, amx: bool, arm_bf16: bool) -> bool:
    forced = os.environ.get(BF16_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return avx512_bf16 or amx or arm_bf16


def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo ({} where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            block = f.read().split("\n\n")[0]
    except OSError:
        return {}
    fields = {}
    for line in block.splitlines():
        k, _, v = line.partition(":")
        fields[k.strip()] = v.strip()
    return fields


def _probe(name: str) -> bool:
    fn = getattr(torch.cpu, name, None)
    try:
        return bool(fn()) if fn is not None else False
    except Exception:  # an old torch, or a probe that cannot run here
        return False


@functools.cache
def _cpu_facts() -> tuple[str, str, bool, bool, bool]:
    info = _cpuinfo()
    model = info.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    flags = set((info.get("flags") or info.get("Features") or "").split())
    capability = torch.backends.cpu.get_cpu_capability()
    avx512_bf16 = _probe("_is_avx512_bf16_supported") or "avx512_bf16" in flags
    amx = _probe("_is_amx_tile_supported") or "amx_bf16" in flags
    arm_bf16 = platform.machine().lower() in ("aarch64", "arm64") and "bf16" in flags
    return model, capability, avx512_bf16, amx, arm_bf16


def machine() -> Machine:
    """This machine now (threads are read each call: a worker may have set its own)."""
    model, capability, avx512_bf16, amx, arm_bf16 = _cpu_facts()
    gpu = cuda = None
    if torch.cuda.is_available():
        gpu, cuda = torch.cuda.get_device_name(0), torch.version.cuda
    return Machine(
        cpu_model=model,
        capability=capability,
        avx512_bf16=avx512_bf16,
        amx=amx,
        arm_bf16=arm_bf16,
        cores=cores(),
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        cuda=cuda,
        gpu=gpu,
    )


def native_bf16(device: torch.device | str = "cpu") -> bool:
    """True where bfloat16 runs on native units on `device`: CUDA, or a CPU with bfloat16
    instructions (AVX512-BF16, AMX, ARM BF16) — where a forced bf16 is not emulated."""
    kind = torch.device(device).type
    if kind == "cuda":
        return True
    if kind == "cpu":  # the CPU facts only (cached): this runs on every autocast entry
        return _bf16(*_cpu_facts()[2:])
    return False
