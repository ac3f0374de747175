"""Forward time with the attended-set plan cached vs rebuilt on every forward (`lab.ladder.plan`).

    python benchmarks/plan_overhead.py                        # paper-60m, T 1024, batch 1
    python benchmarks/plan_overhead.py --preset tiny --repeats 2     # a quick check that it runs

For each schedule (fixed, stagger, learned by default) one model is built and its forward
(eval mode, no_grad; bf16 autocast on CUDA) timed with the plan cache on and off in the same
process, in turns (`lab.machine.measure.time_round_robin`) so background load hits both alike: the median
milliseconds, the ratio off / on, and their difference.  Separately, the plan step alone — what
one forward does per layer before the kernel: read α, `plan_for`, `ColumnPlan.kernel_inputs` —
is timed over many iterations with the cache on and off: the Python overhead per forward.
Cache off (`lab.ladder.plan.set_cache_enabled(False)`, or FIBLAB_PLAN_CACHE=0) rebuilds every plan and
its tensors, as the code did before the cache.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.header import machine_header  # noqa: E402
from lab.ladder import plan
from lab.lm.model import FibLM
from lab.lm.modelconfig import config_for
from lab.machine.measure import time_fn, time_round_robin
from lab.machine.precision import autocast

SCHEDULES = {
    "fixed": dict(schedule="fixed"),
    "stagger": dict(schedule="stagger"),
    "coprime": dict(schedule="coprime"),
    "pow2": dict(schedule="fixed", base="pow2"),
    "learned": dict(schedule="learned"),
}


@contextlib.contextmanager
def plan_cache(enabled: bool):
    """The plan cache on or off (emptied first, so 'on' starts cold like a fresh process)."""
    prev = plan.set_cache_enabled(enabled)
    plan.clear_cache()
    try:
        yield
    finally:
        plan.set_cache_enabled(prev)


def forward_ms(model: FibLM, ids: torch.Tensor, repeats: int) -> dict[str, float]:
    """Median forward milliseconds with the cache on and off, in turns (`lab.machine.measure`)."""
    dev = ids.device
    model.eval()

    def forward(cached: bool):
        plan.set_cache_enabled(cached)
        with torch.no_grad(), autocast(dev):
            model(ids)

    prev = plan.set_cache_enabled(True)
    plan.clear_cache()
    try:  # the warm-up round fills the cache; "off" rebuilds every plan on every call
        t = time_round_robin(
            {"on": lambda: forward(True), "off": lambda: forward(False)}, dev, reps=repeats
        )
    finally:
        plan.set_cache_enabled(prev)
    return {mode: timing.median_s * 1e3 for mode, timing in t.items()}


def plan_step_us(model: FibLM, seq_len: int, device: torch.device, iters: int) -> dict[str, float]:
    """Microseconds per forward of the plan step alone, over all layers, cache on and off."""
    cfg = model.cfg
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    def step():
        for block in model.blocks:
            a = block.attn.alpha
            tensor = isinstance(a, torch.Tensor)
            p = plan.plan_for(
                float(a.detach()) if tensor else a,
                seq_len,
                cfg.ladder,
                interpolate=cfg.interpolated,
            )
            p.kernel_inputs(a if tensor else None, device, dtype)

    out = {}
    for mode in ("on", "off"):
        with plan_cache(mode == "on"):
            out[mode] = time_fn(step, device, warmup=1, reps=iters).median_s * 1e6
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="paper-60m")
    ap.add_argument("--seq-len", type=int, default=None, help="default: the preset's")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--schedules", nargs="+", default=["fixed", "stagger", "learned"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iters", type=int, default=200, help="plan-step iterations")
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    args = ap.parse_args(argv)
    bad = [s for s in args.schedules if s not in SCHEDULES]
    if bad:
        ap.error(f"schedules {bad} unknown: use some of {sorted(SCHEDULES)}")
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    base_cfg = config_for(args.preset)
    T = args.seq_len or base_cfg.seq_len
    machine_header()
    print(
        f"plan overhead: preset={args.preset} T={T} batch={args.batch} device={dev} "
        f"threads={torch.get_num_threads()} repeats={args.repeats} torch={torch.__version__} "
        f"FIBLAB_ATTN_IMPL={os.environ.get('FIBLAB_ATTN_IMPL', '')!r}"
    )
    head = (
        f"{'schedule':<10}{'fwd on ms':>11}{'fwd off ms':>12}{'off/on':>8}{'diff ms':>9}"
        f"{'plan on us':>12}{'plan off us':>13}"
    )
    print(head)
    for name in args.schedules:
        torch.manual_seed(0)
        cfg = config_for(args.preset, seq_len=max(T, base_cfg.seq_len), **SCHEDULES[name])
        model = FibLM(cfg).to(dev)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, cfg.vocab_size, (args.batch, T), generator=g).to(dev)
        fwd = forward_ms(model, ids, args.repeats)
        step = plan_step_us(model, T, dev, args.iters)
        print(
            f"{name:<10}{fwd['on']:>11.2f}{fwd['off']:>12.2f}{fwd['off'] / fwd['on']:>8.3f}"
            f"{fwd['off'] - fwd['on']:>9.2f}{step['on']:>12.1f}{step['off']:>13.1f}"
        )
        del model
    return 0


if __name__ == "__main__":
    sys.exit(main())
