"""Efficiency: analytic attention FLOPs, attended keys and coverage, and the table that puts
them beside the measured speed and memory.

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
              (T − lo) + max(T − lo − 1, 0).  The columns are each layer's `lab.ladder.plan.ColumnPlan`,
              the one the model's forward reads (α·f in float64 from the model's float32 α).

attention FLOPs per layer = 4 · D · H · reads (H query heads; GQA shares K/V rows but every query
head does its own dot products), summed over layers for the model.  ``keys_per_query`` is
reads / T: the mean over positions (early positions see fewer keys) and over layers.  The paper's
own convention (SPEC §5.8: 4·H·T·Katt·D per layer, Katt = the size of the attended set, Katt = T
for dense, no causal halving) is reported beside it as ``attn_gflop_paper``.  ``attn_share`` is
attention FLOPs / (attention + the blocks' linear-layer FLOPs 2·T·Σ weights; the tied lm_head is
left out).  ``union`` is the number of distinct distances attended by any layer (window counted;
`lab.ladder.plan.layer_sets`); for learned, the integer sets of its α (rounded); dense: T.

What is measured (``measure=True``): time and peak memory, `lab.cost.efficiency_measure`
(`measure_models`, `measure_model`, `measure_attention`, `peak_memory`; importable from here too).

    efficiency_table("probe-small", [512, 1024], ["dense", "fixed", "learned"], measure=True)
    fiblab efficiency --preset probe-small --lengths 512 1024 --measure
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch

from lab.cost.efficiency_measure import (
    MODES,
    measure_attention,
    measure_model,
    measure_models,
    peak_memory,
)
from lab.ladder.plan import layer_sets
from lab.ladder.schemes import SCHEMES
from lab.ladder.schemes import scheme as find_scheme
from lab.lm.model import FibLM
from lab.lm.modelconfig import ModelConfig, config_for
from lab.util.checks import positive_int

# measurement is lab.cost.efficiency_measure's; these names stay importable from here, as before
__all__ = [
    "FLOPS_PER_READ_PER_DIM",
    "MODES",
    "MODEL_SCHEMES",
    "analyze",
    "attention_flops",
    "column_reads",
    "config_for",
    "dense_reads",
    "efficiency_table",
    "layer_columns",
    "linear_flops",
    "measure_attention",
    "measure_model",
    "measure_models",
    "peak_memory",
    "scheme_config",
]

#: The schemes the efficiency table counts and times (`lab.ladder.schemes` short names), in its order.
MODEL_SCHEMES: tuple[str, ...] = tuple(s.short for s in SCHEMES if s.name != "blur")
FLOPS_PER_READ_PER_DIM = 4  # QKᵀ and PV: two multiply-adds of length D, 2 FLOPs each


# --------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------
def scheme_config(
    preset_or_cfg: str | ModelConfig, scheme: str, seq_len: int | None = None
) -> ModelConfig:
    """The preset (or config) with one scheme's attention settings (any `lab.ladder.schemes`
    spelling), at length `seq_len`."""
    over = _scheme(scheme, "scheme").model_overrides()
    if seq_len is not None:
        positive_int(seq_len, "seq_len")
        over.update(seq_len=seq_len, train_seq_len=None)
    return config_for(preset_or_cfg, **over)


def _scheme(name, what: str):
    """The registry's scheme for ``name`` (any spelling) among those this table supports."""
    return find_scheme(name, among=MODEL_SCHEMES, what=what)


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
        sets = cfg.attended_sets() if alphas is None else layer_sets(alphas, T, cfg.ladder)
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
# the table
# --------------------------------------------------------------------------------------------
def efficiency_table(
    preset_or_cfg: str | ModelConfig = "probe-small",
    lengths: Sequence[int] | None = None,
    schedules: Sequence[str] = MODEL_SCHEMES,
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
        raise ValueError("schedules is empty: name at least one of " + ", ".join(MODEL_SCHEMES))
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
