"""lab.machine.autotune: implementation choices measured at first use, cached per machine and shape class.

Oracles: candidates that sleep known times (the fastest is known in advance), call counters (a
cached choice calls nothing), a hand-written shape class, and for the lab's two callers the
forced implementations' own outputs and gradients.  The session turns measuring off
(tests/conftest.py); the fixture here turns it back on with a private cache folder.
"""

from __future__ import annotations

import dataclasses
import json
import time
import warnings

import pytest
import torch

import lab.sparse.blur as blur_mod
from lab import kernels
from lab.kernels import cpu
from lab.machine import autotune
from lab.machine.hardware import machine
from lab.sparse.blur import blur_attention


@pytest.fixture
def tuned(monkeypatch, tmp_path):
    """Measuring on, a private cache folder, empty memory; returns the cache file's path."""
    monkeypatch.setenv(autotune.ENABLE_ENV, "1")
    monkeypatch.setenv(autotune.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(autotune, "_MEMORY", {})
    monkeypatch.setattr(autotune, "_WARNED", set())
    monkeypatch.delenv(kernels.ENV, raising=False)
    monkeypatch.delenv(blur_mod.IMPL_ENV, raising=False)
    return tmp_path / autotune.FILE


@pytest.fixture
def built():
    if cpu.status() is not True:
        pytest.skip(f"C++ kernel unavailable: {cpu.status()}")


def sleeper(seconds: float, calls: list, name: str):
    def run():
        calls.append(name)
        time.sleep(seconds)

    return run


def candidates(calls: list, **seconds: float) -> dict:
    return {name: sleeper(s, calls, name) for name, s in seconds.items()}


CLS = "cpu|float32|amp=-|grad|BH8|T64|D16|C16"


# --------------------------------------------------------------------------------------------
# the choice and its caches
# --------------------------------------------------------------------------------------------
def test_first_use_picks_the_fastest_and_records_its_timings(tuned):
    calls = []
    got = autotune.choose("op", CLS, candidates(calls, slow=0.03, fast=0.001, mid=0.012))
    assert got == "fast"
    assert {"slow", "fast", "mid"} <= set(calls)
    (d,) = autotune.decisions()
    assert (d.op, d.shape_class, d.choice) == ("op", CLS, "fast")
    assert d.candidates == ("slow", "fast", "mid")
    assert d.timings_ms["slow"] >= 30 and d.timings_ms["mid"] >= 12  # at least the sleep
    assert d.timings_ms["fast"] < d.timings_ms["mid"] < d.timings_ms["slow"]
    assert d.errors == {} and d.machine_key == machine().key
    assert d.cost_ms >= sum((30, 1, 12))  # every candidate ran at least once
    assert d.cost_ms < 1000  # a short measurement


def test_cached_in_memory_and_on_disk(tuned, monkeypatch):
    calls = []
    assert autotune.choose("op", CLS, candidates(calls, a=0.02, b=0.001)) == "b"
    n = len(calls)
    # later calls: a dict lookup, no candidate runs, not even the machine probe
    with monkeypatch.context() as mp:
        mp.setattr(autotune, "machine", lambda: pytest.fail("machine() on the hot path"))
        assert autotune.choose("op", CLS, candidates(calls, a=0.0, b=0.02)) == "b"
    assert len(calls) == n
    # a fresh process (memory cleared) reads the file: still "b", nothing timed
    autotune.clear()
    assert autotune.choose("op", CLS, candidates(calls, a=0.0, b=0.02)) == "b"
    assert len(calls) == n
    stored = json.loads(tuned.read_text())
    assert stored["version"] == autotune.VERSION
    (key,) = stored["decisions"]
    assert key == f"{machine().key}|op|{CLS}"
    assert stored["decisions"][key]["choice"] == "b"
    assert set(stored["decisions"][key]["timings_ms"]) == {"a", "b"}
    # another shape class, or another candidate set, is measured on its own
    assert autotune.choose("op", CLS + "|x", candidates(calls, a=0.0, b=0.02)) == "a"
    assert autotune.choose("op", CLS, candidates(calls, a=0.02, b=0.02, c=0.0)) == "c"
    assert len(json.loads(tuned.read_text())["decisions"]) == 2  # CLS's entry replaced


def test_another_machine_measures_its_own(tuned, monkeypatch):
    calls = []
    here = machine()
    assert autotune.choose("op", CLS, candidates(calls, a=0.02, b=0.001)) == "b"
    other = dataclasses.replace(here, cpu_model="Other CPU", amx=True)
    assert other.key != here.key
    monkeypatch.setattr(autotune, "machine", lambda: other)
    autotune.clear()
    n = len(calls)
    assert autotune.choose("op", CLS, candidates(calls, a=0.001, b=0.02)) == "a"
    assert len(calls) > n  # measured, not read from the other machine's entry
    assert [d.choice for d in autotune.decisions(here.key)] == ["b"]
    assert [d.choice for d in autotune.decisions(other.key)] == ["a"]
    assert len(json.loads(tuned.read_text())["decisions"]) == 2


def test_a_broken_candidate_is_never_chosen(tuned):
    calls = []

    def broken():
        calls.append("broken")
        raise RuntimeError("planted failure")

    runs = {"broken": broken, **candidates(calls, ok=0.01)}
    assert autotune.choose("op", CLS, runs) == "ok"
    (d,) = autotune.decisions()
    assert d.choice == "ok" and "broken" not in d.timings_ms
    assert d.errors == {"broken": "RuntimeError: planted failure"}
    assert calls.count("broken") == 1  # skipped after it raised
    # all broken: the caller's first, nothing cached (its real call raises the real error)
    assert autotune.choose("op", CLS + "|y", {"x": broken, "z": broken}) == "x"
    assert [d.shape_class for d in autotune.decisions()] == [CLS]


@pytest.mark.parametrize("text", ["{not json", "[]", '{"version": 99, "decisions": {}}'])
def test_a_corrupt_cache_file_is_ignored_with_one_warning(tuned, text):
    tuned.write_text(text)
    calls = []
    with pytest.warns(RuntimeWarning, match="choices.json .*ignoring it") as caught:
        assert autotune.choose("op", CLS, candidates(calls, a=0.02, b=0.001)) == "b"
        autotune.clear()
        tuned.write_text(text)
        assert autotune.choose("op", CLS + "|z", candidates(calls, a=0.001, b=0.02)) == "a"
    assert len([w for w in caught if "choices.json" in str(w.message)]) == 1
    assert len(json.loads(tuned.read_text())["decisions"]) == 1  # rewritten, valid


def test_without_timing_the_first_candidate(tuned, monkeypatch):
    calls = []
    assert autotune.choose("op", CLS, candidates(calls, only=0.0)) == "only"
    monkeypatch.setenv(autotune.ENABLE_ENV, "0")
    assert autotune.choose("op", CLS, candidates(calls, a=0.01, b=0.0)) == "a"
    assert calls == [] and autotune.decisions() == []
    with pytest.raises(ValueError, match="no candidates"):
        autotune.choose("op", CLS, {})


def test_measurable_only_on_real_eager_tensors(monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.zeros(2, 3)
    assert autotune.measurable(x, 1.0)
    assert not autotune.measurable(x, torch.zeros(2, device="meta"))
    with FakeTensorMode():
        assert not autotune.measurable(torch.zeros(2, 3))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not autotune.measurable(x)


def test_shape_classes():
    sc = autotune.shape_class
    base = dict(grad=True, bh=8, t=256, d=32, c=24)
    assert sc("cpu", torch.float32, **base) == "cpu|float32|amp=-|grad|BH8|T256|D32|C32"
    assert sc("cpu", torch.float32, **{**base, "bh": 5, "t": 129, "c": 17}) == sc(
        "cpu", torch.float32, **base
    )
    for change in (dict(t=257), dict(bh=9), dict(d=64), dict(c=33), dict(grad=False)):
        assert sc("cpu", torch.float32, **{**base, **change}) != sc("cpu", torch.float32, **base)
    assert sc("cpu", torch.float64, **base) != sc("cpu", torch.float32, **base)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert "amp=bfloat16" in sc("cpu", torch.float32, **base)
    assert sc("cpu", torch.float32, **base, variant="dfrac").endswith("|dfrac")
    assert autotune.timing_rows(16, 4, "cuda") == 16
    assert 1 <= autotune.timing_rows(16, 4, "cpu") <= 16


# --------------------------------------------------------------------------------------------
# through the lab's two choices
# --------------------------------------------------------------------------------------------
def qkv(B=2, H=4, KV=2, T=40, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, h, T, D, generator=g, requires_grad=True) for h in (H, KV, KV)]


def _columns(impl, fracs_grad=True):
    q, k, v = qkv()
    dists = torch.tensor([0, 1, 2, 3, 7, 12, 20])
    fracs = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.3, 0.6, 0.1], requires_grad=fracs_grad)
    out = kernels.columns_attention(q, k, v, dists, fracs, 0.25, impl)
    out.square().sum().backward()
    return [out.detach(), q.grad, k.grad, v.grad] + ([fracs.grad] if fracs_grad else [])


def test_columns_attention_auto_equals_the_forced(tuned, built):
    auto = _columns("auto")
    (d,) = autotune.decisions()
    assert d.op == "columns_attention" and d.choice in ("cpp", "torch")
    assert set(d.timings_ms) == {"cpp", "torch"} and d.shape_class.endswith("|dfrac")
    for impl in ("cpp", "torch"):
        for a, b in zip(auto, _columns(impl)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    _columns("auto", fracs_grad=False)  # another class: no d/dfrac
    assert len(autotune.decisions()) == 2


def _blur(impl):
    q, k, v = qkv(T=48)
    a = torch.tensor(0.9, requires_grad=True)
    out = blur_attention(q, k, v, alpha=a, window=3, width=2.0, rungs=10, impl=impl)
    out.square().sum().backward()
    return [out.detach(), q.grad, k.grad, v.grad, a.grad]


def test_blur_attention_auto_equals_the_forced(tuned, built):
    auto = _blur("auto")
    (d,) = autotune.decisions()
    assert d.op == "blur_attention" and d.choice in ("band", "fft")
    assert set(d.timings_ms) == {"band", "fft"}
    for impl in ("band", "fft"):
        for a, b in zip(auto, _blur(impl)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _spy(monkeypatch, module, name, calls, delay=0.0):
    real = getattr(module, name)

    def wrapped(*args, **kwargs):
        calls.append(name)
        time.sleep(delay)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)


def test_a_forced_attention_impl_overrides_the_choice(tuned, built, monkeypatch):
    calls = []
    _spy(monkeypatch, kernels, "columns_attention_reference", calls, delay=0.05)  # torch: slow
    _spy(monkeypatch, cpu, "cpp_columns_attention", calls)
    _columns("auto")
    assert [d.choice for d in autotune.decisions()] == ["cpp"]
    calls.clear()
    _columns("auto")  # cached: no timing, the choice runs
    assert calls == ["cpp_columns_attention"]
    calls.clear()
    _columns("torch")  # an explicit impl
    assert calls == ["columns_attention_reference"]
    calls.clear()
    monkeypatch.setenv(kernels.ENV, "torch")  # the environment variable
    _columns("auto")
    assert calls == ["columns_attention_reference"]


def test_a_forced_blur_impl_overrides_the_choice(tuned, built, monkeypatch):
    calls = []
    _spy(monkeypatch, blur_mod, "_band_attention", calls, delay=0.05)  # band: slow
    _blur("auto")
    assert [d.choice for d in autotune.decisions()] == ["fft"]
    calls.clear()
    _blur("auto")
    assert calls == []  # fft
    _blur("band")
    assert calls == ["_band_attention"]
    calls.clear()
    monkeypatch.setenv(blur_mod.IMPL_ENV, "band")
    _blur("auto")
    assert calls == ["_band_attention"]


def test_a_broken_kernel_is_not_chosen_by_auto(tuned, built, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("planted kernel failure")

    monkeypatch.setattr(cpu, "cpp_columns_attention", broken)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _columns("auto")
    (d,) = autotune.decisions()
    assert d.choice == "torch" and "planted kernel failure" in d.errors["cpp"]
    for a, b in zip(got, _columns("torch")):
        torch.testing.assert_close(a, b)


def test_static_order_when_measuring_is_off(tuned, built, monkeypatch):
    monkeypatch.setenv(autotune.ENABLE_ENV, "0")
    calls = []
    _spy(monkeypatch, cpu, "cpp_columns_attention", calls)
    _columns("auto")
    assert calls == ["cpp_columns_attention"] and autotune.decisions() == []
