"""Training throughput: tokens/s of forward + backward + optimizer step.

Two modes.

Models × schedules × attention implementations (``--grid``), the issue-7 table:

    python benchmarks/train_step.py --grid                      # probe-small d2/4/8, paper-60m
    python benchmarks/train_step.py --grid --models probe-small:8 --schedules dense fixed learned

    Each model (``probe-small:<depth>`` at batch 2 × T 512, ``paper-60m`` at batch 1 × T 1024 by
    default; ``--batch`` / ``--seq-len`` override) runs every schedule (dense, fixed, stagger,
    coprime, pow2, learned) with every implementation of the sparse paths (``--impls``: cpp, the
    fused C++ kernel, and torch, the pure-PyTorch reference; FIBLAB_ATTN_IMPL is set per row),
    and prints step time, tokens/s and the time relative to the dense model in the same run.

Training presets (default), the CPU presets of `lab.training.train`:

    python benchmarks/train_step.py                                  # cpu-dense … cpu-learned
    python benchmarks/train_step.py --presets fib-stagger-w8 fib-learned-w8 dense \
        --micro-batch 1 --steps 2

    Each measurement runs `--steps` optimizer steps of `--micro` micro-batches (default: the
    preset's own micro-batch size and one micro-batch per step) and prints tokens/s and the
    ratio to the first preset in the list.  Also prints the time to tokenise the embedded corpus.

Random token windows, AdamW, median of `--steps` steps after one warm-up step.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.header import machine_header  # noqa: E402
from lab import kernels
from lab.ladder.schemes import scheme
from lab.lm.model import FibLM
from lab.lm.modelconfig import config_for
from lab.machine.measure import CLOCKS, time_fn
from lab.training.optim import lr_at, param_groups
from lab.training.trainconfig import make_config

SCHEDULES = {  # model overrides per schedule (`lab.ladder.schemes` short names)
    s: scheme(s).model_overrides()
    for s in ("dense", "fixed", "stagger", "coprime", "pow2-stagger", "learned")
}
MODEL_SHAPES = {"probe-small": (2, 512), "paper-60m": (1, 1024)}  # (batch, T)


# --------------------------------------------------------------------------------------------
# the grid: models × schedules × implementations
# --------------------------------------------------------------------------------------------
def parse_model(spec: str) -> tuple[str, dict]:
    """'probe-small:8' -> ('probe-small', {'n_layers': 8}); 'paper-60m' -> ('paper-60m', {})."""
    name, _, depth = spec.partition(":")
    if name not in MODEL_SHAPES:
        raise SystemExit(
            f"model {name!r} is unknown: use one of {sorted(MODEL_SHAPES)} "
            f"(optionally with :<depth>)"
        )
    return name, ({"n_layers": int(depth)} if depth else {})


def step_seconds(model: FibLM, batch: int, seq_len: int, steps: int, clock: str = "wall") -> float:
    """Median time of one training step (forward, backward, AdamW) after a warm-up; the random
    ids are drawn before the clock starts."""
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    V = model.cfg.vocab_size
    batches = iter(
        [torch.randint(0, V, (batch, seq_len + 1), generator=g) for _ in range(steps + 1)]
    )

    def step():
        ids = next(batches)
        _, loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return time_fn(step, "cpu", warmup=1, reps=steps, clock=clock).median_s


def run_grid(args) -> None:
    impls = args.impls
    for impl in impls:
        kernels.resolve(impl, "cpu", torch.float32)  # builds / checks up front
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, {args.clock} time, "
        f"median of {args.steps} steps after a warm-up; sparse rows per implementation "
        f"({', '.join(impls)})"
    )
    print(
        f"{'model':<16} {'B×T':>9} {'schedule':<12} {'impl':<6} {'step ms':>9} "
        f"{'tokens/s':>9} {'×dense time':>11}"
    )
    saved = os.environ.get(kernels.ENV)
    try:
        for spec in args.models:
            name, over = parse_model(spec)
            batch, seq_len = MODEL_SHAPES[name]
            batch = args.batch or batch
            seq_len = args.seq_len or seq_len
            dense_s = None
            for schedule in ["dense"] + [s for s in args.schedules if s != "dense"]:
                for impl in ["torch"] if schedule == "dense" else impls:
                    os.environ[kernels.ENV] = impl
                    torch.manual_seed(0)
                    cfg = config_for(name, seq_len=seq_len, **over, **SCHEDULES[schedule])
                    sec = step_seconds(FibLM(cfg), batch, seq_len, args.steps, args.clock)
                    dense_s = dense_s or sec
                    print(
                        f"{spec:<16} {f'{batch}×{seq_len}':>9} {schedule:<12} "
                        f"{impl if schedule != 'dense' else '—':<6} {sec * 1e3:>9.0f} "
                        f"{batch * seq_len / sec:>9.0f} {sec / dense_s:>11.2f}",
                        flush=True,
                    )
    finally:
        if saved is None:
            os.environ.pop(kernels.ENV, None)
        else:
            os.environ[kernels.ENV] = saved


# --------------------------------------------------------------------------------------------
# training presets
# --------------------------------------------------------------------------------------------
def tokens_per_second(preset: str, micro_batch: int | None, micro: int, steps: int) -> float:
    cfg = make_config(preset, {"micro_batch": micro_batch} if micro_batch else None)
    torch.manual_seed(0)
    model = FibLM(cfg.model)
    opt = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas)
    B, T, V = cfg.micro_batch, cfg.model.seq_len, cfg.model.vocab_size
    g = torch.Generator().manual_seed(0)
    counter = itertools.count(1)

    def step():
        n = next(counter)
        for group in opt.param_groups:
            group["lr"] = lr_at(n, cfg)
        for _ in range(micro):
            ids = torch.randint(0, V, (B, T + 1), generator=g)
            _, loss = model(ids[:, :-1], ids[:, 1:])
            (loss / micro).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return time_fn(step, "cpu", warmup=1, reps=steps).rate(B * T * micro)


def run_presets(args) -> None:
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"micro-batches per step {args.micro}, median of {args.steps} steps, attention "
        f"implementation {kernels.resolve('auto', 'cpu', torch.float32)}"
    )
    base = None
    for preset in args.presets:
        cfg = make_config(preset, {"micro_batch": args.micro_batch} if args.micro_batch else None)
        tps = tokens_per_second(preset, args.micro_batch, args.micro, args.steps)
        base = base or tps
        print(
            f"{preset:<18} B={cfg.micro_batch:<3} T={cfg.model.seq_len:<5} "
            f"{tps:>10.0f} tokens/s  ×{tps / base:.2f}",
            flush=True,
        )
    if not args.no_tokenise:
        from lab.data.prepared import prepare

        with tempfile.TemporaryDirectory() as d:
            for vocab in (2048, 32768):
                t0 = time.perf_counter()
                data = prepare("bible", vocab_size=vocab, cache_dir=d)
                print(
                    f"tokenise the embedded corpus at vocab {vocab}: "
                    f"{time.perf_counter() - t0:.1f} s, {len(data.tokens('train')):,} train + "
                    f"{len(data.tokens('val')):,} held-out tokens"
                )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--grid", action="store_true", help="models × schedules × implementations")
    p.add_argument(
        "--models",
        nargs="+",
        default=["probe-small:2", "probe-small:4", "probe-small:8", "paper-60m"],
    )
    p.add_argument("--schedules", nargs="+", default=list(SCHEDULES), choices=list(SCHEDULES))
    p.add_argument(
        "--impls",
        nargs="+",
        default=["cpp", "torch"],
        choices=[i for i in kernels.IMPLS if i != "auto"],
    )
    p.add_argument("--batch", type=int, default=None, help="grid: batch size override")
    p.add_argument("--seq-len", type=int, default=None, help="grid: sequence length override")
    p.add_argument(
        "--presets",
        nargs="+",
        default=["cpu-dense", "cpu-fixed", "cpu-stagger", "cpu-coprime", "cpu-learned"],
    )
    p.add_argument("--micro-batch", type=int, default=None)
    p.add_argument("--micro", type=int, default=1, help="micro-batches per timed step")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument(
        "--clock",
        choices=list(CLOCKS),
        default="wall",
        help="grid: wall time or the process's CPU time (see benchmarks/attention.py)",
    )
    p.add_argument("--no-tokenise", action="store_true")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    machine_header()
    if args.grid:
        run_grid(args)
    else:
        run_presets(args)


if __name__ == "__main__":
    main()
