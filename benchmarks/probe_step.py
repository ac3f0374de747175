"""The retrieval probe's training step (Table 2's cost): blur gather implementations × precision.

    python benchmarks/probe_step.py                       # depths 2 4 8, 2 threads (all cores)
    python benchmarks/probe_step.py --depths 8 --steps 20 --threads 1
    python benchmarks/probe_step.py --json benchmarks/results/probe-step.json

For each depth, one `probe-small` model at the paper's Table 2 settings (T = 512, batch 2,
AdamW lr 1e-3, staggered init, blur mechanism) is timed for a full training step (forward,
backward, optimizer) with

    fft  / fp32   blurred rows by FFT, float32 — the implementation before the band kernel
    band / fp32   dense scores + the C++ band kernel (lab/kernels/csrc/blur_band.h)
    fft  / bf16   FFT under bfloat16 autocast (the paper's probe precision)
    band / bf16   the band kernel under bfloat16 autocast
    dense / fp32, dense / bf16   the dense-attention probe model, for reference

(FIBLAB_BLUR_IMPL forces the implementation per row).  The step time is the median over
`--steps` steps after warm-up, at two blur widths (40, the start of the anneal, and 0.5, its
end; the mean is reported).  Ratios are against fft / fp32 measured in the same run.  The
last table is what the whole Table 2 grid (4 cells a depth × 2,500 steps) costs at each row's
step times, run one cell at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.header import machine_header  # noqa: E402
from lab.machine.measure import time_fn
from lab.sparse.blur import IMPL_ENV
from probes.runner import build_probe_model, train_step  # noqa: E402
from probes.settings import SCALES, Cell  # noqa: E402

ROWS = [
    ("blur", "fft", "fp32"),
    ("blur", "band", "fp32"),
    ("blur", "fft", "bf16"),
    ("blur", "band", "bf16"),
    ("dense", "-", "fp32"),
    ("dense", "-", "bf16"),
]


def step_time(mech: str, impl: str, precision: str, depth: int, steps: int) -> float:
    """Median seconds of one training step, mean over blur widths 40 and 0.5."""
    settings = SCALES["paper"]
    cell = Cell(mech, depth, "staggered" if mech == "blur" else "-", 0)
    torch.manual_seed(0)
    model = build_probe_model(cell, settings)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr)
    gen = torch.Generator().manual_seed(0)
    if impl != "-":
        os.environ[IMPL_ENV] = impl

    def step():
        train_step(model, opt, cell, settings, gen, precision)

    per_width = []
    try:
        for width in (40.0, 0.5) if mech == "blur" else (None,):
            if width is not None:
                model.set_blur_width(width)
            per_width.append(time_fn(step, "cpu", warmup=2, reps=steps).median_s)
    finally:
        os.environ.pop(IMPL_ENV, None)
    return sum(per_width) / len(per_width)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--steps", type=int, default=10, help="timed steps per width")
    ap.add_argument("--threads", type=int, default=None, help="default: all cores")
    ap.add_argument("--json", default=None, help="write the measurements here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    info = machine_header()
    res: dict[str, dict[int, float]] = {}
    for mech, impl, prec in ROWS:
        name = f"{mech} {impl} {prec}".replace(" - ", " ")
        res[name] = {}
        for depth in args.depths:
            res[name][depth] = step_time(mech, impl, prec, depth, args.steps)
            print(
                f"  {name:<16} depth {depth}: {res[name][depth] * 1e3:7.1f} ms/step",
                file=sys.stderr,
                flush=True,
            )
    base = res["blur fft fp32"]
    print(
        f"\nprobe-small training step, T=512, batch 2, {threads} thread(s); ms/step "
        f"(ratio to blur fft fp32, same run)\n"
    )
    print("| row | " + " | ".join(f"depth {d}" for d in args.depths) + " |")
    print("|---|" + "---|" * len(args.depths))
    for name, by in res.items():
        cells = [f"{by[d] * 1e3:.0f} ({by[d] / base[d]:.2f}×)" for d in args.depths]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nthe Table 2 grid at these step times (4 cells a depth × 2,500 steps, one at a time)\n")
    for name, by in res.items():
        if name.startswith("blur"):
            total = sum(4 * 2500 * by[d] for d in args.depths)
            print(f"  {name:<16} {total / 60:6.1f} min")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": info,
                    "threads": threads,
                    "steps": args.steps,
                    "ms_per_step": {
                        k: {str(d): v * 1e3 for d, v in by.items()} for k, by in res.items()
                    },
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
