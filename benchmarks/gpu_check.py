"""One GPU run: check every GPU attention path against float64, then benchmark them.

    python benchmarks/gpu_check.py                              # on an H200: ≈ 8 min, all sections
    python benchmarks/gpu_check.py --budget-s 300 --lengths 1024 16384
    python benchmarks/gpu_check.py --dry-run                    # = --device cpu --smoke: a dry run
                                                                # on CPU (Triton interpreter, tiny)

Sections (each in its own try/except: an error is printed, recorded and the run goes on; a
section or measurement that would start past --budget-s is skipped and recorded as such):

0. ``gate``   what ``impl="auto"`` decides here: the Triton kernel's first-use check
   (`lab.kernels.selfcheck`, float32 and bfloat16; the later ``auto`` rows use its verdict), and
   flex (``impl="flex"``, `lab.kernels.flex`) against Triton on one integer-α problem at
   ``--tune-T`` (outputs and q/k/v gradients).
1. ``check``  outputs and gradients (q, k, v and α) of every path against the float64 oracle
   (`lab.kernels.oracle` over the columns `ColumnPlan.oracle_columns` gives), for a few shapes (GQA 1 and 4,
   D 32 and 64, Fibonacci and pow2 bases, integer and learned α): the fused Triton kernel, the
   pure-PyTorch ``shift`` / ``interp`` paths, the ``mask`` path, ``auto`` (whatever the dispatch
   picks) and flex_attention with a hand-built block mask (integer offsets).  float32 to 1e-5;
   bfloat16 (Triton 1e-2, auto 3e-2) against the reference evaluated on the same bf16-rounded
   inputs.
2. ``tune``   the Triton launch shape (queries per program, warps) at one length; the fastest
   forward+backward is used for the rest of the run.
3. ``attn``   attention forward and forward+backward, B=1, 8 heads, 2 KV heads, head_dim 64,
   W=8, Fibonacci K=15, α=1 (integer set, and a learned α tensor), bfloat16, T = 1,024 … 65,536:
   dense causal SDPA (flash), the mask path (T ≤ 16,384), shift, interp, auto and Triton
   (integer, learned); median ms, peak memory, ratios to dense and to mask in the same run.
4. ``train``  a full paper-60m training step (forward, backward, AdamW) at T=1,024 under bf16
   autocast: dense vs fixed vs learned, with the default dispatch (``auto``), with the Triton
   kernel forced, and with the pure-PyTorch paths; tokens/s, ratio to dense, learned / fixed.
4b. ``long``  long context (issue 41): that step at batch 1 and T = 4,096 and 16,384
   (``--long-lengths``), dense vs fixed / stagger / learned with the default dispatch, in bf16
   autocast and in fp32: time relative to dense, peak memory — the GPU side of
   ``benchmarks/long_context.py``.
5. ``probe``  the retrieval probe (Table 2's cost): the blur gather on the device (its FFT
   implementation; the band kernel is CPU-only) against float64 on CPU, outputs and q/k/v/α
   gradients; then a probe-small training step (T=512, batch 2, bf16 autocast) at depths 2/4/8
   for the dense model and the blur mechanism, and what the 12-cell grid would take.
6. ``flex``   the same attention table's flex_attention column (integer set, hand-built block
   mask, torch.compile'd; CUDA only), late because every length compiles anew.
7. ``ray``    one tiny Ray sweep on the GPU: a local Ray instance, two ``tiny`` runs of 6 steps,
   one GPU per task (`fiblab.cluster.ray_run.run_sweep`, what ``fiblab sweep`` runs), against the same
   two runs trained here (losses, evaluations and α to 1e-3 relative; bit-equality recorded).
   Skipped, and recorded as such, without CUDA (so in a dry run) or without Ray.

Everything lands in one JSON (``--out``; under ``machine``, `lab.machine.hardware`'s record of the
machine, whose line is also the first line printed), rewritten after each section so a cut-off
run keeps what it measured.  Timings are medians after a warm-up (which includes Triton /
torch.compile compilation).  The sections live in ``benchmarks/gpu/`` (one module each; its
``__init__`` names them); this script is their command line.

On the lent H200 the image's own ``python3`` holds a CUDA torch and Triton (the project's CPU
venv does not travel); one command for the compiled-kernel test and this script, ≈ 8 min:

    export PYTHONUNBUFFERED=1
    python3 -m pytest -q tests/lab/test_triton_kernel.py -k cuda 2>&1 | tee $OUT/pytest.log
    python3 benchmarks/gpu_check.py --budget-s 390 --out $OUT/gpu-check.json | tee $OUT/log
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.gpu.attn import REPS, section_attn, section_tune  # noqa: E402
from benchmarks.gpu.check import CHECK_SHAPES, SMOKE_CHECK_SHAPES, section_check  # noqa: E402
from benchmarks.gpu.gate import section_gate  # noqa: E402
from benchmarks.gpu.model_step import section_long, section_train  # noqa: E402
from benchmarks.gpu.probe import section_probe  # noqa: E402
from benchmarks.gpu.ray_sweep import section_ray  # noqa: E402
from benchmarks.gpu.run import Run, write_record  # noqa: E402
from benchmarks.gpu.tables import print_tables  # noqa: E402
from benchmarks.header import machine_header  # noqa: E402

# run order: the gate first (its verdict is what 'auto' uses after it), flex compiles late
SECTIONS = ("gate", "check", "tune", "attn", "train", "long", "probe", "flex", "ray")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="benchmarks/results/gpu-check.json", help="JSON results")
    p.add_argument(
        "--dry-run", action="store_true", help="= --device cpu --smoke (test the script on CPU)"
    )
    p.add_argument("--budget-s", type=float, default=480, help="overall wall-clock budget")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run)")
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    p.add_argument("--lengths", nargs="+", type=int, default=[1024, 4096, 16384, 65536])
    p.add_argument("--tune-T", type=int, default=16384)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--train-preset", default="paper-60m")
    p.add_argument("--train-batch", type=int, default=8)
    p.add_argument("--train-steps", type=int, default=5)
    p.add_argument("--train-seq-len", type=int, default=None, help="default: the preset's")
    p.add_argument("--long-lengths", nargs="+", type=int, default=[4096, 16384])
    p.add_argument("--long-steps", type=int, default=3)
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes everywhere (a quick test of the script itself)",
    )
    args = p.parse_args(argv)
    if args.dry_run:
        args.device, args.smoke = "cpu", True
    info = machine_header()

    if args.device.startswith("cpu"):
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel import
    elif not torch.cuda.is_available():
        print("no CUDA device here: run on a GPU machine, or --device cpu --smoke for a dry run")
        return 2
    run = Run(args.budget_s, args.device)
    run.record["machine"] = info
    dtype = getattr(torch, args.dtype)
    if args.smoke:
        args.lengths, args.tune_T = [64], 64
        args.train_preset, args.train_batch, args.train_steps = "tiny", 2, 1
        args.long_lengths, args.long_steps = [64], 1
        REPS[:] = [1, 1]  # benchmarks.gpu.attn's repetitions, in place
        if args.device.startswith("cpu"):
            dtype = torch.float32
    env = dict(
        torch=torch.__version__,
        python=platform.python_version(),
        device=args.device,
        dtype=str(dtype),
        date=time.strftime("%Y-%m-%d %H:%M:%S"),
        args=vars(args),
    )
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception as e:
        env["triton"] = f"unavailable: {e}"
    if run.device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(run.device)
    run.record["env"] = env
    print(json.dumps(env))

    launch = None
    sections = [s for s in SECTIONS if s in args.sections]
    for sec in sections:
        print(f"\n== {sec} ({run.left():.0f} s left)", flush=True)
        try:
            if sec == "gate":
                section_gate(run, args.tune_T, args.smoke)
            elif sec == "ray":
                section_ray(run)
            elif sec == "check":
                section_check(run, SMOKE_CHECK_SHAPES if args.smoke else CHECK_SHAPES)
            elif sec == "tune":
                launch = section_tune(run, args.tune_T, dtype)
            elif sec == "attn":
                section_attn(run, args.lengths, dtype, launch)
            elif sec == "flex":
                section_attn(run, args.lengths, dtype, launch, flex=True)
            elif sec == "train":
                section_train(
                    run,
                    args.train_preset,
                    args.train_batch,
                    args.train_steps,
                    args.train_seq_len,
                    launch,
                )
            elif sec == "long":
                section_long(run, args.train_preset, args.long_lengths, args.long_steps)
            elif sec == "probe":
                section_probe(run, args.smoke, 1 if args.smoke else 10)
        except Exception as e:
            run.error(sec, e)
        write_record(run, args.out)  # keep partial results
    print_tables(run)
    run.record["elapsed_s"] = time.perf_counter() - run.t0
    write_record(run, args.out)
    print(f"\nwrote {args.out} ({run.record['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
