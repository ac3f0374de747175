"""Before a launch: how long would this configuration train on this machine?

The paper's presets train 13,000 steps × 32,768 tokens of a 60M model: weeks on a CPU.  A
launcher asks `launch_estimate` first and warns when the answer is long.

    seconds = steps × tokens per step × training FLOPs per token ÷ this machine's FLOP/s

* training FLOPs per token = 3 × the forward pass (backward ≈ 2 × forward): the blocks' linear
  layers and attention reads (`lab.cost.efficiency.analyze`) and the tied lm head (2·d·vocab).
* this machine's FLOP/s, in order of preference: a language-model run recorded in the store
  (its median ``tokens_per_s`` × its FLOPs per token; of the recorded runs the one whose model
  is closest in FLOPs per token, FLOP rates growing with size), else a few training steps of the
  dense ``cpu-small`` model timed here (≈ 1 s on a quiet machine; dense needs no kernel build).

A small model runs at a lower FLOP rate than a large one, so the estimate errs long — the right
side for a warning.  Evaluations are left out (they add a few per cent at the presets' cadence).

Beside other lab jobs a run gets its share of the cores (`lab.machine.cpu_share`), so `shared_slowdown`
scales a recorded speed by cores ÷ its threads (long again: one thread is more efficient per
core than two).  A speed timed here now ran beside the same jobs and is not scaled.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import time
from dataclasses import dataclass

__all__ = [
    "Speed",
    "WARN_S",
    "train_flops_per_token",
    "recorded_speed",
    "measured_speed",
    "machine_speed",
    "may_be_long",
    "run_seconds",
    "shared_slowdown",
]

WARN_S = 3600.0  # longer than this on a machine without GPUs: ask before launching
SLOWEST_FLOPS = 1e9  # no CPU trains slower: below WARN_S at this rate needs no estimate


@dataclass(frozen=True)
class Speed:
    """A training speed of this machine, as FLOP/s, and where it comes from (words)."""

    flops_per_s: float
    basis: str
    ref_flops_per_token: float  # of the model it was measured on
    timed_now: bool = False  # timed here just now, beside whatever else runs


def train_flops_per_token(model_cfg) -> float:
    """Training FLOPs per token of a `lab.lm.modelconfig.ModelConfig` (forward × 3, lm head included)."""
    from lab.cost.efficiency import analyze

    a = analyze(model_cfg)
    T = model_cfg.seq_len
    head = 2 * T * model_cfg.d_model * model_cfg.vocab_size
    return 3.0 * (a["linear_flops"] + a["attn_flops"] + head) / T


def recorded_speed(store_path: str, target: float, limit: int = 20) -> Speed | None:
    """This machine's speed from the LM runs the store recorded (the ``limit`` most recent):
    the one whose model's FLOPs per token are closest to ``target``'s (efficiency grows with
    model size); None when the store holds none with a logged ``tokens_per_s``."""
    import os

    from lab.lm.typedconfig import config_from_dict
    from lab.store import Store
    from lab.training.trainconfig import TrainConfig

    if not store_path or not os.path.exists(store_path):
        return None
    best = None
    with Store(store_path) as st, st.snapshot():
        runs = st.runs(kind="lm").tail(limit)
        if runs.empty:
            return None
        m = st.metrics(list(runs["name"]), names="tokens_per_s")
    for r in runs.itertuples(index=False):
        rates = [v for v in m.loc[m["run"] == r.name, "value"] if math.isfinite(v) and v > 0]
        if not rates:
            continue
        try:
            cfg = config_from_dict(json.loads(r.config_json or "{}"), TrainConfig)
            fpt = train_flops_per_token(cfg.model)
        except (ValueError, TypeError, AttributeError, KeyError):
            continue  # a config of another version: not a measure of this one
        rate = statistics.median(rates)
        gap = abs(math.log(fpt / target))
        if best is None or gap <= best[0]:
            best = (gap, fpt, rate, r.name)
    if best is None:
        return None
    _, fpt, rate, name = best
    return Speed(fpt * rate, f"run {name!r} in the store trained {rate:,.0f} tokens/s", fpt)


@functools.lru_cache(maxsize=1)  # once per process: seconds on a busy CPU
def measured_speed(steps: int = 3) -> Speed:
    """Time ``steps`` training steps (forward, backward, AdamW) of the dense ``cpu-small`` model
    on one micro-batch of 4 × 256 tokens, here, now."""
    import torch

    from lab.lm.model import FibLM
    from lab.lm.modelconfig import config_for

    cfg = config_for("cpu-small", attention="dense")
    torch.manual_seed(0)
    model = FibLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, cfg.vocab_size, (4, cfg.seq_len + 1))  # (B, T + 1)
    x, y = ids[:, :-1], ids[:, 1:]

    def step():
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):  # warm-up: the first steps allocate and start thread pools (seconds)
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    rate = x.numel() / statistics.median(times)
    fpt = train_flops_per_token(cfg)
    return Speed(
        fpt * rate, f"a dense cpu-small model timed here trained {rate:,.0f} tokens/s", fpt, True
    )


def machine_speed(store_path: str, target: float) -> Speed:
    """This machine's speed for a model of ``target`` training FLOPs per token: the store's
    record of a model of about that size or at least as large as ``cpu-small`` (a much smaller
    one's overheads would make the estimate wildly long), else a timing here."""
    from lab.lm.modelconfig import config_for

    rec = recorded_speed(store_path, target)
    small = train_flops_per_token(config_for("cpu-small", attention="dense"))
    if rec is not None and (rec.ref_flops_per_token >= 0.5 * min(small, target)):
        return rec
    return measured_speed()


def may_be_long(cfg) -> bool:
    """Whether ``cfg`` could train longer than `WARN_S` even on the slowest machine (cheap: no
    timing, no store)."""
    total = cfg.steps * cfg.tokens_per_step * train_flops_per_token(cfg.model)
    return total > WARN_S * SLOWEST_FLOPS


def shared_slowdown(speed: Speed, jobs=None, n_cores: int | None = None) -> tuple[float, str]:
    """How much longer a run launched now takes beside the machine's other lab jobs (``jobs``:
    `lab.machine.cpu_share.live_jobs`), and a few words saying why ('' when 1): cores ÷ the threads
    its share gives it, for a speed not timed beside them."""
    from lab.machine import cpu_share

    n = cpu_share.cores() if n_cores is None else n_cores
    jobs = cpu_share.live_jobs() if jobs is None else jobs
    t = cpu_share.threads_for_new_job(jobs, n)
    if speed.timed_now or not jobs or t >= n:
        return 1.0, ""
    return n / t, (
        f"sharing the {n} cores with {len(jobs)} other lab job{'s' * (len(jobs) != 1)} "
        f"({t} thread{'s' * (t != 1)} of {n} while they run)"
    )


def run_seconds(cfg, speed: Speed) -> float:
    """Training seconds of a `lab.training.trainconfig.TrainConfig` at ``speed``."""
    return cfg.steps * cfg.tokens_per_step * train_flops_per_token(cfg.model) / speed.flops_per_s
