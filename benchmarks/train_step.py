"""Training throughput: tokens/s of forward + backward + optimizer step, per preset.

    python benchmarks/train_step.py                                  # the CPU presets
    python benchmarks/train_step.py --presets fib-stagger-w8 fib-learned-w8 dense --micro-batch 1 --steps 2

Each measurement runs `--steps` optimizer steps of `--micro` micro-batches (default: the preset's
own micro-batch size and one micro-batch per step) on random token windows after one warm-up
step, and prints tokens/s and the ratio to the first preset in the list (same process).
Also prints the time to tokenise the embedded corpus (cached after the first call).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lab.model import FibLM  # noqa: E402
from lab.train import lr_at, make_config, param_groups  # noqa: E402


def tokens_per_second(preset: str, micro_batch: int | None, micro: int, steps: int) -> float:
    cfg = make_config(preset, {"micro_batch": micro_batch} if micro_batch else None)
    torch.manual_seed(0)
    model = FibLM(cfg.model)
    opt = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas)
    B, T, V = cfg.micro_batch, cfg.model.seq_len, cfg.model.vocab_size
    g = torch.Generator().manual_seed(0)
    times = []
    for step in range(steps + 1):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr_at(step + 1, cfg)
        for _ in range(micro):
            ids = torch.randint(0, V, (B, T + 1), generator=g)
            _, loss = model(ids[:, :-1], ids[:, 1:])
            (loss / micro).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step:
            times.append(time.perf_counter() - t0)
    return B * T * micro / statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--presets", nargs="+",
                   default=["cpu-dense", "cpu-fixed", "cpu-stagger", "cpu-coprime", "cpu-learned"])
    p.add_argument("--micro-batch", type=int, default=None)
    p.add_argument("--micro", type=int, default=1, help="micro-batches per timed step")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--no-tokenise", action="store_true")
    args = p.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"micro-batches per step {args.micro}, median of {args.steps} steps")
    base = None
    for preset in args.presets:
        cfg = make_config(preset, {"micro_batch": args.micro_batch} if args.micro_batch else None)
        tps = tokens_per_second(preset, args.micro_batch, args.micro, args.steps)
        base = base or tps
        print(f"{preset:<18} B={cfg.micro_batch:<3} T={cfg.model.seq_len:<5} "
              f"{tps:>10.0f} tokens/s  ×{tps / base:.2f}", flush=True)
    if not args.no_tokenise:
        from lab.data import prepare
        with tempfile.TemporaryDirectory() as d:
            for vocab in (2048, 32768):
                t0 = time.perf_counter()
                data = prepare("bible", vocab_size=vocab, cache_dir=d)
                print(f"tokenise the embedded corpus at vocab {vocab}: "
                      f"{time.perf_counter() - t0:.1f} s, {len(data.tokens('train')):,} train + "
                      f"{len(data.tokens('val')):,} held-out tokens")


if __name__ == "__main__":
    main()
