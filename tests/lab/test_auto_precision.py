"""`--precision auto` on a CPU (issue 41): bf16 only where this machine measured it faster for
the workload class, not under load, with the quality check held; fp32 in every other case,
with the reason.  The CPU's bf16 units are scripted (both profiles on any machine), the
measurements written through the same cache a run reads."""

from __future__ import annotations

import pytest

from lab.machine import autotune, precision
from lab.machine.precision import (
    auto_precision,
    record_precision,
    resolve_precision,
    workload_class,
)

W = workload_class("lm-train", 4, 128, 128, 32, "sparse")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(autotune.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(autotune, "_MEMORY", {})
    return tmp_path


def native(monkeypatch, yes: bool):
    monkeypatch.setattr(precision, "native_bf16", lambda device="cpu": yes)


def test_the_workload_class_names_the_shape():
    assert W == "lm-train|L4|d128|T128|B32|sparse"
    assert (
        workload_class("lm-train", 16, 512, 4096, 3, "dense") == "lm-train|L16|d512|T4096|B4|dense"
    )


def test_without_bf16_units_or_a_measurement_auto_is_fp32(cache, monkeypatch):
    native(monkeypatch, False)
    record_precision(W, 1.0, 0.4, 0.001, 0.0)  # even a (scripted) faster bf16 is not taken
    assert auto_precision("cpu", W)[0] == "fp32" and "emulated" in auto_precision("cpu", W)[1]
    native(monkeypatch, True)
    assert auto_precision("cpu")[0] == "fp32"  # no workload named
    other = workload_class("lm-train", 8, 128, 128, 32, "sparse")
    p, why = auto_precision("cpu", other)
    assert p == "fp32" and "not measured" in why
    assert auto_precision("cuda", W)[0] == "bf16"


def test_bf16_is_chosen_only_measured_faster_quietly_and_with_quality(cache, monkeypatch):
    native(monkeypatch, True)
    d = record_precision(W, 1.0, 0.53, 0.002, 0.05)  # the Zen 5's 60M ratio, quiet
    assert d.choice == "bf16" and d.checks == {"quality_delta": 0.002, "quality_ok": True}
    p, why = auto_precision("cpu", W)
    assert p == "bf16" and "quality check held" in why
    assert resolve_precision("auto", "cpu", W) == "bf16"
    assert resolve_precision("fp32", "cpu", W) == "fp32"  # an explicit pin always wins
    autotune._MEMORY.clear()  # the next process reads the file
    assert auto_precision("cpu", W)[0] == "bf16"
    for fp32, bf16, delta, other, says in (
        (1.0, 0.97, 0.002, 0.0, "measured faster than bf16"),  # within the noise margin
        (1.0, 1.6, 0.002, 0.0, "measured faster than bf16"),  # the Xeon's way
        (1.0, 0.5, 0.05, 0.0, "differed from fp32"),  # quality check failed
        (1.0, 0.5, 0.002, 1.5, "under load"),  # measured beside other work
    ):
        record_precision(W, fp32, bf16, delta, other)
        p, why = auto_precision("cpu", W)
        assert p == "fp32" and says in why, (fp32, bf16, delta, other, why)
