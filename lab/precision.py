"""Compute precision: the names, the autocast context, and each device's default.

    PRECISIONS = ("fp32", "bf16")
    with autocast(device, precision): ...

``"bf16"``   bfloat16 autocast on the device's type (weights and optimizer stay float32)
``"fp32"``   autocast switched *off* on the device's type: float32 even inside an outer autocast
``None``     the device's default, `default_precision(device)`: bfloat16 autocast on CUDA (the
             paper's GPU runs); elsewhere the default is float32 and nothing is entered, so an
             autocast the caller opened stays in force — the rule of training and evaluation

A caller that must be float32 whatever surrounds it passes "fp32" (the efficiency timings on
CPU, the retrieval probe's fp32 cells); one that follows the device passes None.
"""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("fp32", "bf16")


def check_precision(precision: str) -> str:
    """`precision` when it is one of PRECISIONS, else a ValueError naming the choices."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} must be one of {PRECISIONS}")
    return precision


def default_precision(device: torch.device | str) -> str:
    """The precision a device computes in by default: "bf16" on CUDA, "fp32" elsewhere."""
    return "bf16" if torch.device(device).type == "cuda" else "fp32"


def autocast(device: torch.device | str, precision: str | None = None):
    """The context for computing on `device` in `precision` (see the module docstring)."""
    dev = torch.device(device).type
    if precision is None:
        if default_precision(dev) == "fp32":
            return contextlib.nullcontext()
        precision = default_precision(dev)
    if check_precision(precision) == "bf16":
        return torch.autocast(dev, dtype=torch.bfloat16)
    return torch.autocast(dev, enabled=False)
