"""Sampling speed of `lab.lm.generate.generate` (KV-cache-free) against the forward pass it repeats.

    .venv/bin/python benchmarks/generate_speed.py [--preset cpu-small] [--threads 1] [--new 64]

Prints the machine first, then tokens/s after a short prompt (16 tokens: each step re-runs the
whole prefix) and with the window full (each step re-runs seq_len tokens), and beside each the
ratio to 1 / (one forward of that length), measured in the same process: a ratio ≈ 1 says the
sampling loop costs nothing beyond the forward it repeats.  Weights are random (speed does not
depend on them).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from benchmarks.header import machine_header  # noqa: E402
from lab.lm.generate import generate
from lab.lm.model import build_model


def _forward_s(model, T: int, reps: int = 5) -> float:
    ids = torch.randint(1, model.cfg.vocab_size, (1, T))
    with torch.no_grad():
        model(ids)  # warm-up (plans, kernel build)
        t0 = time.perf_counter()
        for _ in range(reps):
            model(ids)
    return (time.perf_counter() - t0) / reps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="cpu-small")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--new", type=int, default=64, help="tokens sampled per measurement")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    machine_header()
    torch.manual_seed(0)
    model = build_model(args.preset).eval()
    T = model.cfg.seq_len
    print(f"{args.preset}: {model.num_params():,} parameters, seq_len {T}, fp32")
    for label, prompt_len in (("short prompt (16)", 16), (f"window full ({T})", T)):
        ids = torch.randint(1, model.cfg.vocab_size, (1, prompt_len))
        generate(model, ids, 2, seed=0)  # warm-up
        t0 = time.perf_counter()
        generate(model, ids, args.new, seed=0, temperature=0.8, top_k=50)
        tok_s = args.new / (time.perf_counter() - t0)
        mid = min(T, prompt_len + args.new // 2)  # the average prefix length re-run
        fwd = 1.0 / _forward_s(model, mid)
        print(
            f"{label:>20}: {tok_s:7.1f} tokens/s   forward({mid}) {fwd:7.1f}/s   "
            f"ratio {tok_s / fwd:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
