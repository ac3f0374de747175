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
              (T − lo) + max(T − lo − 1, 0).  The columns are each layer's `lab.plan.ColumnPlan`,
              the one the model's forward reads (α·f in float64 from the model's float32 α).

attention FLOPs per layer = 4 · D · H · reads (H query heads; GQA shares K/V rows but every query
head does its own dot products), summed over layers for the model.  ``keys_per_query`` is
reads / T: the mean over positions (early positions see fewer keys) and over layers.  The paper's
own convention (SPEC §5.8: 4·H·T·Katt·D per layer, Katt = the size of the attended set, Katt = T
for dense, no causal halving) is reported beside it as ``attn_gflop_paper``.  ``attn_share`` is
attention FLOPs / (attention + the blocks' linear-layer FLOPs 2·T·Σ weights; the tied lm_head is
left out).  ``union`` is the number of distinct distances attended by any layer (window counted;
`lab.plan.layer_sets`); for learned, the integer sets of its α (rounded); dense: T.

What is measured
----------------
Time: the median over ``repeats`` runs after one warm-up of a forward (eval mode, no_grad) and of
a forward+backward (train mode, loss.backward(), gradients dropped after each), on random ids,
batch B, length T; tokens/s = B·T / median.  Several models are timed round-robin in one process
(`measure_models`) so that background load hits them alike; ``fwd_x_fixed`` is a scheme's
latency over the fixed scheme's at the same T.  The learned row is this code's counterpart of the
paper's "≈5× slower" (SPEC §8: 4.77× for the materialized gather against the fused bool mask, on
a GPU); here it is the interp path against the shift path.  On CUDA the runs use bf16 autocast
and synchronise; on CPU autocast is off (float32).  Timing and peak memory are `lab.measure`'s.

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
import sys
from collections.abc import Callable, Sequence

import torch

from lab.config import config_from_dict
from lab.measure import peak_growth, run_child, time_fn, time_round_robin
from lab.model import FibLM, ModelConfig, config_for
from lab.plan import layer_sets
from lab.precision import autocast, default_precision
from lab.schemes import SCHEMES as ALL_SCHEMES
from lab.schemes import scheme as find_scheme

#: The schemes the efficiency table counts and times (`lab.schemes` short names), in its order.
SCHEMES: tuple[str, ...] = tuple(s.short for s in ALL_SCHEMES if s.name != "blur")
FLOPS_PER_READ_PER_DIM = 4  # QKᵀ and PV: two multiply-adds of length D, 2 FLOPs each


# --------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------
def scheme_config(
    preset_or_cfg: str | ModelConfig, scheme: str, seq_len: int | None = None
) -> ModelConfig:
    """The preset (or config) with one scheme's attention settings (any `lab.schemes`
    spelling), at length `seq_len`."""
    over = _scheme(scheme, "scheme").model_overrides()
    if seq_len is not None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"seq_len={seq_len!r} must be a positive integer")
        over.update(seq_len=seq_len, train_seq_len=None)
    return config_for(preset_or_cfg, **over)


def _scheme(name, what: str):
    """The registry's scheme for ``name`` (any spelling) among those this table supports."""
    return find_scheme(name, among=SCHEMES, what=what)


# --------------------------------------------------------------------------------------------
# analytic counts
# --------------------------------------------------------------------------------------------
def layer_columns(
    cfg: ModelConfig, alphas: Sequence[float] | None = None
) -> list[list[tuple[int, int]]] | None:
    """Per layer, the columns a query reads as (distance, rows): rows 1 for an integer column,
    2 for an interpolated rung (rows d and d + 1); `ColumnPlan.columns` of each layer's plan
    (`ModelConfig.layer_plans`).  None for dense attention.

    ``alphas`` overrides the per-layer α (e.g. a trained learned model's ``model.alphas()``)."""
    plans = cfg.layer_plans(alphas)
    return None if plans is None else [p.columns() for p in plans]


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
    plans = cfg.layer_plans(alphas)
    if plans is None:
        katt, reads, union = [T] * L, [dense_reads(T)] * L, T
    else:
        katt = [len(p) for p in plans]
        reads = [p.reads() for p in plans]
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
    mode after a warm-up of all of them (`lab.measure.peak_growth`); -1 where it cannot be
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
        got = json.loads(run_child(["-m", "lab.efficiency", "--child", json.dumps(spec)]))
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
    # any spelling in, the table's names out (fixed, stagger, …)
    schedules = [_scheme(s, "schedule").short for s in schedules]
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
