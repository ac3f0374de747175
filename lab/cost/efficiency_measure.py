"""Measured speed and peak memory of models and of single attention calls, on `lab.machine.measure`.

What is measured
----------------
Time: the median over ``repeats`` runs after one warm-up of a forward (eval mode, no_grad) and of
a forward+backward (train mode, loss.backward(), gradients dropped after each), on random ids,
batch B, length T; tokens/s = B·T / median.  Several models are timed round-robin in one process
(`measure_models`) so that background load hits them alike; ``fwd_x_fixed`` is a scheme's
latency over the fixed scheme's at the same T.  The learned row is this code's counterpart of the
paper's "≈5× slower" (SPEC §8: 4.77× for the materialized gather against the fused bool mask, on
a GPU); here it is the interp path against the shift path.  On CUDA the runs use bf16 autocast
and synchronise; on CPU autocast is off (float32).  Timing and peak memory are `lab.machine.measure`'s.

Peak memory (bytes, reported in MiB): the growth of the peak over the memory held once the model
and inputs exist, during one forward and, separately, one forward+backward, after a warm-up of
both (so one-time allocations such as thread pools are not counted).  CUDA:
``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``.  CPU: a fresh subprocess
per model or attention call (``python -m lab.cost.efficiency_measure --child …``, with this process's torch
thread count) with glibc's mmap threshold at 64 KiB (``MALLOC_MMAP_THRESHOLD_``) so freed
tensors leave the resident set; the peak resident set
(Linux VmHWM) is reset through ``/proc/self/clear_refs`` just before the run, and the result is
VmHWM − VmRSS-before.  Where /proc is missing or not writable the value is NaN.

The analytic counts and the table that puts them beside these numbers are `lab.cost.efficiency`.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence

import torch

from lab.lm.model import FibLM
from lab.lm.modelconfig import ModelConfig
from lab.lm.typedconfig import config_from_dict
from lab.machine.measure import peak_growth, run_child, time_fn, time_round_robin
from lab.machine.precision import autocast, default_precision
from lab.util.checks import positive_int


# --------------------------------------------------------------------------------------------
# measurement: time
# --------------------------------------------------------------------------------------------
def _inputs(vocab: int, batch: int, seq_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq_len + 1), generator=g)  # (B, T+1)
    return ids[:, :-1].to(device), ids[:, 1:].to(device)  # (B, T) each


def _forward(model: torch.nn.Module, ids, device) -> None:
    model.eval()
    with torch.no_grad(), autocast(device, default_precision(device)):
        model(ids)


def _forward_backward(model: torch.nn.Module, ids, targets, device) -> None:
    model.train()
    with autocast(device, default_precision(device)):
        _, loss = model(ids, targets)
    loss.backward()
    for p in model.parameters():
        p.grad = None


def measure_models(
    models: dict[str, torch.nn.Module],
    batch: int = 1,
    seq_len: int | None = None,
    repeats: int = 3,
    device=None,
    backward: bool = True,
) -> dict[str, dict]:
    """Forward and forward+backward latency of several models, timed round-robin in this process.

    Every model must take ``model(ids, targets) -> (logits, loss)`` with ids (B, T) and carry a
    ``cfg`` (FibLM); they share the same random ids, drawn from the first model's vocabulary.  Returns {name: {fwd_ms, fwd_tok_s, fwdbwd_ms, fwdbwd_tok_s}} (medians
    over ``repeats`` after one warm-up; the fwd+bwd keys only with ``backward``)."""
    if not models:
        raise ValueError("models is empty: pass at least one {name: model}")
    positive_int(batch, "batch")
    positive_int(repeats, "repeats")
    first = next(iter(models.values()))
    cfg = getattr(first, "cfg", None)
    if cfg is None:
        raise ValueError(
            "measure_models needs FibLM-like models with a .cfg (vocab_size, "
            "seq_len) to draw the random ids from"
        )
    dev = torch.device(device) if device is not None else next(first.parameters()).device
    T = seq_len or cfg.seq_len
    ids, targets = _inputs(cfg.vocab_size, batch, T, dev)
    runs: dict[tuple[str, str], Callable[[], None]] = {}
    for name, model in models.items():  # per round: each model's fwd, then its fwd+bwd
        runs[name, "fwd"] = lambda m=model: _forward(m, ids, dev)
        if backward:
            runs[name, "fwdbwd"] = lambda m=model: _forward_backward(m, ids, targets, dev)
    timed = time_round_robin(runs, dev, warmup=1, reps=repeats)
    out: dict[str, dict] = {name: {} for name in models}
    for (name, kind), t in timed.items():
        out[name][f"{kind}_ms"] = t.median_s * 1e3
        out[name][f"{kind}_tok_s"] = t.rate(batch * T)
    return out


def measure_model(
    model: torch.nn.Module,
    batch: int = 1,
    seq_len: int | None = None,
    repeats: int = 3,
    device=None,
    backward: bool = True,
) -> dict:
    """`measure_models` for one model: {fwd_ms, fwd_tok_s, fwdbwd_ms, fwdbwd_tok_s}."""
    return measure_models({"model": model}, batch, seq_len, repeats, device, backward)["model"]


def _attention_inputs(seq_len, batch, n_heads, n_kv_heads, head_dim, device, grad):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, n_heads, seq_len, head_dim, generator=g).to(device)
    k = torch.randn(batch, n_kv_heads, seq_len, head_dim, generator=g).to(device)
    v = torch.randn(batch, n_kv_heads, seq_len, head_dim, generator=g).to(device)
    for x in (q, k, v):
        x.requires_grad_(grad)
    return q, k, v


def _attention_call(spec: dict, q, k, v, backward: bool) -> None:
    from lab.ladder.offsets import Ladder
    from lab.sparse.attention import sparse_attention

    alpha = spec["alpha"]
    if spec["learned"]:
        alpha = torch.tensor(float(alpha), device=q.device, requires_grad=backward)
    kw = dict(
        alpha=alpha,
        ladder=Ladder(spec["window"], base=spec["base"], rungs=spec["rungs"]),
        path=spec["path"],
    )
    if backward:
        sparse_attention(q, k, v, **kw).sum().backward()
    else:
        with torch.no_grad():
            sparse_attention(q, k, v, **kw)


def _attention_spec(alpha, path, window, base, rungs) -> dict:
    learned = isinstance(alpha, torch.Tensor) or alpha == "learned"
    a = float(alpha) if isinstance(alpha, torch.Tensor) or alpha != "learned" else 1.0
    base = list(base) if not isinstance(base, str) else base
    return dict(alpha=a, learned=learned, path=path, window=window, base=base, rungs=rungs)


def measure_attention(
    seq_len: int,
    alpha=1.0,
    *,
    path: str = "auto",
    window: int = 8,
    base="fib",
    rungs: int = 15,
    n_heads: int = 8,
    n_kv_heads: int = 2,
    head_dim: int = 64,
    batch: int = 1,
    repeats: int = 3,
    device="cpu",
    memory: bool = True,
) -> dict:
    """Latency (and peak memory) of one `sparse_attention` call on random q, k, v.

    ``alpha``: a float (integer set: shift / mask path) or "learned" (a 0-d tensor α = 1 with
    requires_grad, the interp path).  Returns {fwd_ms, fwdbwd_ms, fwd_tok_s, fwdbwd_tok_s} plus
    {fwd_peak_mib, fwdbwd_peak_mib} with ``memory`` (see the module docstring)."""
    dev = torch.device(device)
    spec = _attention_spec(alpha, path, window, base, rungs)
    shape = (seq_len, batch, n_heads, n_kv_heads, head_dim)
    out = {}
    for kind, backward in (("fwd", False), ("fwdbwd", True)):
        q, k, v = _attention_inputs(*shape, dev, backward)
        t = time_fn(lambda: _attention_call(spec, q, k, v, backward), dev, reps=repeats)
        out[f"{kind}_ms"] = t.median_s * 1e3
        out[f"{kind}_tok_s"] = t.rate(batch * seq_len)
    if memory:
        child = dict(kind="attention", spec=spec, shape=list(shape))
        for kind, b in _peak_bytes(child, dev, MODES).items():
            out[f"{kind}_peak_mib"] = b / 2**20
    return out


# --------------------------------------------------------------------------------------------
# measurement: peak memory
# --------------------------------------------------------------------------------------------


MODES = ("fwd", "fwdbwd")


def _child_runs(spec: dict, device: torch.device) -> dict[str, Callable[[], None]]:
    """Build what `spec` describes (a model or attention inputs); one run per mode."""
    if spec["kind"] == "model":
        torch.manual_seed(0)
        cfg = config_from_dict(spec["cfg"], ModelConfig)
        model = FibLM(cfg).to(device)
        ids, targets = _inputs(cfg.vocab_size, spec["batch"], cfg.seq_len, device)
        return {
            "fwd": lambda: _forward(model, ids, device),
            "fwdbwd": lambda: _forward_backward(model, ids, targets, device),
        }
    q, k, v = _attention_inputs(*spec["shape"], device, True)
    return {
        "fwd": lambda: _attention_call(spec["spec"], q, k, v, False),
        "fwdbwd": lambda: _attention_call(spec["spec"], q, k, v, True),
    }


def _child_peak(spec: dict) -> dict[str, int]:
    """Runs in the measuring process: {mode: peak-memory growth in bytes} of one run of each
    mode after a warm-up of all of them (`lab.machine.measure.peak_growth`); -1 where it cannot be
    measured (no writable /proc/self/clear_refs)."""
    torch.set_num_threads(spec.get("threads", torch.get_num_threads()))
    device = torch.device(spec["device"])
    runs = {m: r for m, r in _child_runs(spec, device).items() if m in spec["modes"]}
    for run in runs.values():  # warm-up
        run()
    out = {}
    for mode, run in runs.items():
        peak = peak_growth(run, device)
        out[mode] = int(peak.bytes) if peak.measured else -1
    return out


def _peak_bytes(spec: dict, device: torch.device, modes: Sequence[str]) -> dict[str, float]:
    """{mode: peak memory growth in bytes}: in-process on CUDA, in one fresh subprocess on the
    CPU (see the module docstring); NaN where it cannot be measured."""
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"modes={list(modes)!r} must name some of {MODES}")
    spec = dict(spec, device=str(device), modes=list(modes), threads=torch.get_num_threads())
    if device.type == "cuda":
        got = _child_peak(spec)
    else:
        got = json.loads(
            run_child(["-m", "lab.cost.efficiency_measure", "--child", json.dumps(spec)])
        )
    return {m: math.nan if got[m] < 0 else float(got[m]) for m in modes}


def peak_memory(
    cfg: ModelConfig, batch: int = 1, device="cpu", modes: Sequence[str] = MODES
) -> dict[str, float]:
    """{"fwd": bytes, "fwdbwd": bytes}: peak memory growth of one forward (no_grad) and one
    forward+backward of a fresh model built from `cfg` at its seq_len (weights do not change
    memory), measured in one process.  NaN where it cannot be measured."""
    spec = dict(kind="model", cfg=cfg.to_dict(), batch=batch)
    return _peak_bytes(spec, torch.device(device), modes)


def _child_main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[0] != "--child":
        raise SystemExit(
            "usage: python -m lab.cost.efficiency_measure --child SPEC_JSON (internal; use `fiblab efficiency`)"
        )
    print(json.dumps(_child_peak(json.loads(argv[1]))))


if __name__ == "__main__":
    _child_main(sys.argv[1:])
