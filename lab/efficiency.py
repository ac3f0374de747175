"""Efficiency: analytic attention FLOPs, attended keys, coverage, and measured speed and memory.

What is counted (analytic)
--------------------------
For one sequence of length T, one layer and one query head, every (query i, key row j) read costs
a D-long dot product for the score q_i·k_j and a D-long multiply-add for p_ij·v_j: D + D
multiply-adds, i.e. **4·D FLOPs per read** (a multiply-add counts 2).  Softmax, scaling, RoPE
and the blend of an interpolated key are not counted.  Reads per layer:

    dense     causal: query i reads keys 0..i, so T(T+1)/2 reads (the ideal count; SDPA's blocks
              may compute more)
    integer   (fixed / stagger / coprime / pow2 / pow2-stagger: the shift path) Σ_d (T − d) over
              the layer's attended distances d (query i reads distance d when i ≥ d)
    learned   (the interp path) window distances as above; a rung column at lo = ⌊α·f⌋ reads two
              rows, i − lo and i − lo − 1, for i > lo and one row at i = lo:
              (T − lo) + max(T − lo − 1, 0).  The rung columns are the paper's interpolated rule
              (`lab.offsets.interp_columns`) with α·f computed in float32, as the model does.

attention FLOPs per layer = 4 · D · H · reads (H query heads; GQA shares K/V rows but every query
head does its own dot products), summed over layers for the model.  ``keys_per_query`` is
reads / T: the mean over positions (early positions see fewer keys) and over layers.  The paper's
own convention (SPEC §5.8: 4·H·T·Katt·D per layer, Katt = the size of the attended set, Katt = T
for dense, no causal halving) is reported beside it as ``attn_gflop_paper``.  ``attn_share`` is
attention FLOPs / (attention + the blocks' linear-layer FLOPs 2·T·Σ weights; the tied lm_head is
left out).  ``union`` is the number of distinct distances attended by any layer (window counted;
`lab.offsets.layer_sets`); for learned, the integer sets of its α (rounded); dense: T.

What is measured
----------------
Time: the median over ``repeats`` runs after one warm-up of a forward (eval mode, no_grad) and of
a forward+backward (train mode, loss.backward(), gradients dropped after each), on random ids,
batch B, length T; tokens/s = B·T / median.  Several models are timed round-robin in one process
(`measure_models`) so that background load hits them alike; ``fwd_x_fixed`` is a scheme's
latency over the fixed scheme's at the same T.  The learned row is this code's counterpart of the
paper's "≈5× slower" (SPEC §8: 4.77× for the materialized gather against the fused bool mask, on
a GPU); here it is the interp path against the shift path.  On CUDA the runs use bf16 autocast
and synchronise.

Peak memory (bytes, reported in MiB): the growth of the peak over the memory held once the model
and inputs exist, during one forward and, separately, one forward+backward, after a warm-up of
both (so one-time allocations such as thread pools are not counted).  CUDA:
``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``.  CPU: a fresh subprocess
per model or attention call (``python -m lab.efficiency --child …``, with this process's torch
thread count) with glibc's mmap threshold at 64 KiB (``MALLOC_MMAP_THRESHOLD_``) so freed
tensors leave the resident set; the peak resident set
(Linux VmHWM) is reset through ``/proc/self/clear_refs`` just before the run, and the result is
VmHWM − VmRSS-before.  Where /proc is missing or not writable the value is NaN.

    efficiency_table("probe-small", [512, 1024], ["dense", "fixed", "learned"], measure=True)
    fiblab efficiency --preset probe-small --lengths 512 1024 --measure
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from lab import offsets
from lab.config import config_from_dict
from lab.model import FibLM, ModelConfig, config_for
from lab.offsets import layer_sets

# scheme name -> ModelConfig overrides
SCHEMES: dict[str, dict] = {
    "dense": dict(attention="dense", path="auto"),
    "fixed": dict(attention="sparse", schedule="fixed", base="fib", path="auto"),
    "stagger": dict(attention="sparse", schedule="stagger", base="fib", path="auto"),
    "coprime": dict(attention="sparse", schedule="coprime", base="fib", path="auto"),
    "pow2": dict(attention="sparse", schedule="fixed", base="pow2", path="auto"),
    "pow2-stagger": dict(attention="sparse", schedule="stagger", base="pow2", path="auto"),
    "learned": dict(attention="sparse", schedule="learned", base="fib", path="auto"),
}
FLOPS_PER_READ_PER_DIM = 4  # QKᵀ and PV: two multiply-adds of length D, 2 FLOPs each


# --------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------
def scheme_config(
    preset_or_cfg: str | ModelConfig, scheme: str, seq_len: int | None = None
) -> ModelConfig:
    """The preset (or config) with one scheme's attention settings, at length `seq_len`."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r} is unknown: use one of {list(SCHEMES)}")
    over = dict(SCHEMES[scheme])
    if seq_len is not None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"seq_len={seq_len!r} must be a positive integer")
        over.update(seq_len=seq_len, train_seq_len=None)
    return config_for(preset_or_cfg, **over)


# --------------------------------------------------------------------------------------------
# analytic counts
# --------------------------------------------------------------------------------------------
def _learned_targets(cfg: ModelConfig, alpha: float, explicit: bool) -> list[float]:
    """α·f_k in float32 as the interp path computes them (α from θ unless given explicitly)."""
    if explicit:
        a = torch.tensor(float(alpha), dtype=torch.float32)
    else:  # the model stores θ = logit(α) in float32 and recomputes α = α_min + span·sigmoid(θ)
        theta = torch.tensor(offsets.theta_from_alpha(alpha, cfg.alpha_min, cfg.alpha_span))
        a = offsets.alpha_from_theta(theta, cfg.alpha_min, cfg.alpha_span)
    f = torch.tensor(
        offsets.resolve_base(cfg.base, cfg.rungs, max(cfg.rung_reach, 2)), dtype=a.dtype
    )
    return (a * f).tolist()


def layer_columns(
    cfg: ModelConfig, alphas: Sequence[float] | None = None
) -> list[list[tuple[int, int]]] | None:
    """Per layer, the columns a query reads as (distance, rows): rows 1 for an integer column,
    2 for an interpolated rung (rows d and d + 1).  None for dense attention.

    ``alphas`` overrides the per-layer α (e.g. a trained learned model's ``model.alphas()``)."""
    if cfg.attention == "dense":
        return None
    T = cfg.seq_len
    explicit = alphas is not None
    alphas = list(cfg.layer_alphas() if alphas is None else alphas)
    if len(alphas) != cfg.n_layers:
        raise ValueError(
            f"{len(alphas)} alphas given for n_layers={cfg.n_layers}: give one per layer"
        )
    window = [(d, 1) for d in range(min(cfg.window, T - 1) + 1)]
    out = []
    for a in alphas:
        if cfg.learned:
            targets = _learned_targets(cfg, a, explicit)
            rungs = offsets.interp_columns(targets, cfg.window, T, cfg.rung_reach)
            out.append(window + [(lo, 2) for _, lo in rungs])
        else:
            out.append(
                [
                    (d, 1)
                    for d in offsets.attended_distances(
                        a, cfg.window, T, cfg.base, cfg.rungs, cfg.rounding, cfg.rung_reach
                    )
                ]
            )
    return out


def column_reads(columns: Sequence[tuple[int, int]], seq_len: int) -> int:
    """(query, key row) reads of one layer over positions 0..T−1 (see the module docstring)."""
    T = seq_len
    n = 0
    for d, rows in columns:
        n += max(T - d, 0)
        if rows == 2:
            n += max(T - d - 1, 0)
    return n


def dense_reads(seq_len: int) -> int:
    """Causal dense attention: query i reads keys 0..i, T(T+1)/2 reads in all."""
    return seq_len * (seq_len + 1) // 2


def attention_flops(reads: int, n_heads: int, head_dim: int) -> int:
    """4·D FLOPs per read per query head (QKᵀ and PV multiply-adds, ×2)."""
    return FLOPS_PER_READ_PER_DIM * head_dim * n_heads * reads


def linear_flops(cfg: ModelConfig, seq_len: int | None = None) -> int:
    """FLOPs of the blocks' linear layers for one sequence: 2·T·Σ weights (q, k, v, o and the
    three SwiGLU matrices per layer; the tied lm_head is left out)."""
    T = cfg.seq_len if seq_len is None else seq_len
    d, hd = cfg.d_model, cfg.head_dim
    per_layer = d * hd * (2 * cfg.n_heads + 2 * cfg.n_kv_heads) + 3 * d * cfg.ffn_hidden
    return 2 * T * per_layer * cfg.n_layers


def analyze(cfg: ModelConfig, alphas: Sequence[float] | None = None) -> dict:
    """Analytic attention cost of a config at its seq_len: per layer and for the model.

    Keys: seq_len, columns (per layer, Katt), reads (per layer), keys_per_query (per layer, mean
    over positions), flops (per layer), attn_flops (model), attn_flops_paper (SPEC §5.8
    convention), linear_flops, attn_share, union."""
    T, L, H, D = cfg.seq_len, cfg.n_layers, cfg.n_heads, cfg.head_dim
    cols = layer_columns(cfg, alphas)
    if cols is None:
        katt, reads, union = [T] * L, [dense_reads(T)] * L, T
    else:
        katt = [len(c) for c in cols]
        reads = [column_reads(c, T) for c in cols]
        layer_alpha = list(cfg.layer_alphas() if alphas is None else alphas)
        sets = layer_sets(
            layer_alpha, cfg.window, T, cfg.base, cfg.rungs, cfg.rounding, cfg.rung_reach
        )
        union = len(set().union(*sets))
    flops = [attention_flops(r, H, D) for r in reads]
    attn = sum(flops)
    lin = linear_flops(cfg)
    return {
        "seq_len": T,
        "columns": katt,
        "reads": reads,
        "keys_per_query": [r / T for r in reads],
        "flops": flops,
        "attn_flops": attn,
        "attn_flops_paper": sum(FLOPS_PER_READ_PER_DIM * H * T * k * D for k in katt),
        "linear_flops": lin,
        "attn_share": attn / (attn + lin),
        "union": union,
    }


# --------------------------------------------------------------------------------------------
# measurement: time
# --------------------------------------------------------------------------------------------
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _autocast(device: torch.device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def _inputs(vocab: int, batch: int, seq_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq_len + 1), generator=g)  # (B, T+1)
    return ids[:, :-1].to(device), ids[:, 1:].to(device)  # (B, T) each


def _forward(model: torch.nn.Module, ids, device) -> None:
    model.eval()
    with torch.no_grad(), _autocast(device):
        model(ids)


def _forward_backward(model: torch.nn.Module, ids, targets, device) -> None:
    model.train()
    with _autocast(device):
        _, loss = model(ids, targets)
    loss.backward()
    for p in model.parameters():
        p.grad = None


def _timed(fn: Callable[[], None], device: torch.device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


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
    for name, value in (("batch", batch), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")
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
    times: dict[str, dict[str, list]] = {n: {"fwd": [], "fwdbwd": []} for n in models}
    for rep in range(repeats + 1):  # rep 0: warm-up
        for name, model in models.items():
            t = _timed(lambda: _forward(model, ids, dev), dev)
            if rep:
                times[name]["fwd"].append(t)
            if backward:
                t = _timed(lambda: _forward_backward(model, ids, targets, dev), dev)
                if rep:
                    times[name]["fwdbwd"].append(t)
    out = {}
    for name in models:
        row = {}
        for kind in ("fwd", "fwdbwd") if backward else ("fwd",):
            med = statistics.median(times[name][kind])
            row[f"{kind}_ms"] = med * 1e3
            row[f"{kind}_tok_s"] = batch * T / med
        out[name] = row
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
    from lab.attention import sparse_attention

    alpha = spec["alpha"]
    if spec["learned"]:
        alpha = torch.tensor(float(alpha), device=q.device, requires_grad=backward)
    kw = dict(
        alpha=alpha,
        window=spec["window"],
        base=spec["base"],
        rungs=spec["rungs"],
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
        ts = [
            _timed(lambda: _attention_call(spec, q, k, v, backward), dev)
            for _ in range(repeats + 1)
        ][1:]
        med = statistics.median(ts)
        out[f"{kind}_ms"] = med * 1e3
        out[f"{kind}_tok_s"] = batch * seq_len / med
    if memory:
        child = dict(kind="attention", spec=spec, shape=list(shape))
        for kind, b in _peak_bytes(child, dev, MODES).items():
            out[f"{kind}_peak_mib"] = b / 2**20
    return out


# --------------------------------------------------------------------------------------------
# measurement: peak memory
# --------------------------------------------------------------------------------------------
def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


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
    mode after a warm-up of all of them; -1 where it cannot be measured (no writable
    /proc/self/clear_refs)."""
    import gc

    torch.set_num_threads(spec.get("threads", torch.get_num_threads()))
    device = torch.device(spec["device"])
    runs = {m: r for m, r in _child_runs(spec, device).items() if m in spec["modes"]}
    for run in runs.values():  # warm-up
        run()
    out = {}
    for mode, run in runs.items():
        gc.collect()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            run()
            torch.cuda.synchronize(device)
            out[mode] = torch.cuda.max_memory_allocated(device) - base
            continue
        try:
            with open("/proc/self/clear_refs", "w") as f:  # VmHWM := VmRSS
                f.write("5")
            base = status_kib("VmRSS")
        except OSError:
            out[mode] = -1
            continue
        run()
        out[mode] = (status_kib("VmHWM") - base) * 1024
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
        root = str(Path(__file__).resolve().parents[1])
        env = dict(
            os.environ,
            MALLOC_MMAP_THRESHOLD_="65536",
            PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
        )
        res = subprocess.run(
            [sys.executable, "-m", "lab.efficiency", "--child", json.dumps(spec)],
            capture_output=True,
            text=True,
            env=env,
            cwd=root,
        )
        if res.returncode != 0:
            raise RuntimeError(f"memory measurement subprocess failed:\n{res.stderr[-2000:]}")
        got = json.loads(res.stdout.strip().splitlines()[-1])
    return {m: math.nan if got[m] < 0 else float(got[m]) for m in modes}


def peak_memory(
    cfg: ModelConfig, batch: int = 1, device="cpu", modes: Sequence[str] = MODES
) -> dict[str, float]:
    """{"fwd": bytes, "fwdbwd": bytes}: peak memory growth of one forward (no_grad) and one
    forward+backward of a fresh model built from `cfg` at its seq_len (weights do not change
    memory), measured in one process.  NaN where it cannot be measured."""
    spec = dict(kind="model", cfg=cfg.to_dict(), batch=batch)
    return _peak_bytes(spec, torch.device(device), modes)


# --------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------
def efficiency_table(
    preset_or_cfg: str | ModelConfig = "probe-small",
    lengths: Sequence[int] | None = None,
    schedules: Sequence[str] = tuple(SCHEMES),
    measure: bool = False,
    repeats: int = 3,
    *,
    batch: int = 1,
    device=None,
    memory: bool = True,
):
    """One row per (length, scheme): the analytic counts and, with ``measure``, the timings.

    lengths default to the preset's seq_len.  Analytic columns: scheme, T, layers, heads,
    head_dim, cols_min, cols_max (Katt per layer), keys_per_query (mean over positions and
    layers), union, reads (model), attn_gflop (model, one sequence), attn_gflop_layer (mean),
    x_dense (attention FLOPs over dense causal at the same T), attn_share, attn_gflop_paper.
    Measured columns: batch, device, fwd_ms, fwd_tok_s, fwdbwd_ms, fwdbwd_tok_s, fwd_x_fixed,
    fwdbwd_x_fixed (latency over the fixed scheme timed alongside; NaN without "fixed") and,
    with ``memory``, fwd_peak_mib and fwdbwd_peak_mib.  Returns a pandas DataFrame whose
    ``attrs`` record the conventions (torch version, threads, device, repeats)."""
    import pandas as pd

    schedules = list(schedules)
    if not schedules:
        raise ValueError("schedules is empty: name at least one of " + ", ".join(SCHEMES))
    for s in schedules:
        if s not in SCHEMES:
            raise ValueError(f"schedule={s!r} is unknown: use one of {list(SCHEMES)}")
    base_cfg = config_for(preset_or_cfg)
    lengths = [base_cfg.seq_len] if lengths is None else list(lengths)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    rows = []
    for T in lengths:
        cfgs = {s: scheme_config(base_cfg, s, T) for s in schedules}
        dense_flops = (
            attention_flops(dense_reads(T), base_cfg.n_heads, base_cfg.head_dim) * base_cfg.n_layers
        )
        block = []
        for s, cfg in cfgs.items():
            a = analyze(cfg)
            block.append(
                {
                    "scheme": s,
                    "T": T,
                    "layers": cfg.n_layers,
                    "heads": cfg.n_heads,
                    "head_dim": cfg.head_dim,
                    "cols_min": min(a["columns"]),
                    "cols_max": max(a["columns"]),
                    "keys_per_query": sum(a["keys_per_query"]) / cfg.n_layers,
                    "union": a["union"],
                    "reads": sum(a["reads"]),
                    "attn_gflop": a["attn_flops"] / 1e9,
                    "attn_gflop_layer": a["attn_flops"] / cfg.n_layers / 1e9,
                    "x_dense": a["attn_flops"] / dense_flops,
                    "attn_share": a["attn_share"],
                    "attn_gflop_paper": a["attn_flops_paper"] / 1e9,
                }
            )
        if measure:
            models = {}
            for s, cfg in cfgs.items():
                torch.manual_seed(0)
                models[s] = FibLM(cfg).to(dev)
            timed = measure_models(models, batch, T, repeats, dev)
            del models
            ref = timed.get("fixed")
            for row in block:
                t = timed[row["scheme"]]
                row.update(batch=batch, device=str(dev), **t)
                for kind in ("fwd", "fwdbwd"):
                    row[f"{kind}_x_fixed"] = (
                        t[f"{kind}_ms"] / ref[f"{kind}_ms"] if ref else math.nan
                    )
                if memory:
                    for kind, b in peak_memory(cfgs[row["scheme"]], batch, dev).items():
                        row[f"{kind}_peak_mib"] = b / 2**20
        rows.extend(block)
    df = pd.DataFrame(rows)
    df.attrs.update(
        preset=preset_or_cfg if isinstance(preset_or_cfg, str) else "custom",
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        device=str(dev),
        attn_impl_env=os.environ.get("FIBLAB_ATTN_IMPL", ""),
        repeats=repeats,
        batch=batch,
        flops="4*D per (query, key row) read per head; QK and PV; causal; "
        "learned reads two rows per rung",
    )
    return df


def _child_main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[0] != "--child":
        raise SystemExit(
            "usage: python -m lab.efficiency --child SPEC_JSON (internal; use `fiblab efficiency`)"
        )
    print(json.dumps(_child_peak(json.loads(argv[1]))))


if __name__ == "__main__":
    _child_main(sys.argv[1:])
