"""Subcommands that measure trained runs and schemes: eval, efficiency.

Nothing heavy at the top: torch and the lab's models are imported by the ``cmd_*`` functions,
so ``fiblab --help`` stays fast."""

from __future__ import annotations

import argparse
import sys

from fiblab.cli.argtypes import (
    DEVICE_HELP,
    add_model_preset,
    device_arg,
    positive_int,
    scheme_arg,
    store_arg,
)
from fiblab.cli.choices import DEFAULT_FACTORS
from fiblab.cli.choices import EFFICIENCY_SCHEMES as SCHEMES
from lab.lm.modelconfig import RUNG_POLICIES
from lab.util import paths


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def format_report(res: dict) -> str:
    """A readable table of an `evaluate_run` result."""
    lines = [
        f"run {res['run']}  step {res['step']}  trained at T={res['train_len']}  "
        f"{res['attention']} {res['schedule']}  alpha "
        + " ".join(f"{a:.3f}" for a in res["alphas"])
    ]
    for ds, d in res["datasets"].items():
        lines.append(f"\n{ds}: {d['tokens_available']:,} held-out tokens")
        lines.append(
            f"  {'factor':>6} {'ctx':>6} {'policy':<10}{'windows':>8}{'tokens':>10}"
            f"{'ppl':>10}   position-matched ppl, block 0..m-1   new rungs"
        )
        for c in d["cells"]:
            head = f"  {c['factor']:>6} {c['context_len']:>6} {c['policy']:<10}"
            if c["skipped"]:
                lines.append(head + f"  skipped: {c['skipped']}")
                continue
            blocks = " ".join(f"{b['ppl']:.3f}" for b in c["blocks"])
            nr = c["new_rungs"]
            new = (
                "-"
                if nr is None
                else "; ".join(f"L{i}: {','.join(map(str, r))}" for i, r in enumerate(nr) if r)
                or "none"
            )
            lines.append(
                head + f"{c['windows']:>8}{c['tokens']:>10}{c['ppl']:>10.3f}   {blocks}   {new}"
            )
        b = d.get("bins")
        if b:
            lines.append(
                f"  position bins (T={b['seq_len']}, edges {b['edges']}), mean NLL: "
                + " ".join(f"b{i} {v:.4f}" for i, v in enumerate(b["loss"]))
            )
    return "\n".join(lines)


def cmd_eval(args) -> int:
    from fiblab.cli.argtypes import resolve_device
    from lab.evaluation.evalrun import evaluate_run
    from lab.util import jsonio

    res = evaluate_run(
        args.run_dir,
        factors=args.factors,
        policies=args.policies,
        bins=not args.no_bins,
        store_path=args.store or None,
        limit_windows=args.limit,
        batch_size=args.batch,
        device=resolve_device(args.device),
        data_dir=args.data_dir,
        log=lambda s: print(s, file=sys.stderr),
    )
    if args.json:
        print(jsonio.dumps(res, indent=1))
    else:
        print(format_report(res))
    return 0


def add_eval(subparsers) -> None:
    """Register `fiblab eval RUN_DIR …` on an argparse subparsers object (calls args.fn)."""
    s = subparsers.add_parser(
        "eval",
        help="held-out perplexity, length extrapolation and position bins of a run",
        description="Evaluate a trained run folder (config.json + checkpoints): perplexity per "
        "held-out domain, length extrapolation with recomputed / frozen rung sets "
        "and position-matched blocks, and the paper's 8 position bins; results go "
        "to the experiment store under the run's name.",
    )
    s.add_argument("run_dir", help="the run folder, e.g. runs/cpu-stagger")
    s.add_argument(
        "--factors",
        type=int,
        nargs="+",
        default=list(DEFAULT_FACTORS),
        help="multiples of the training length",
    )
    s.add_argument(
        "--policies",
        nargs="+",
        choices=RUNG_POLICIES,
        default=list(RUNG_POLICIES),
        help="rung set at longer lengths: recompute (the paper's) and/or freeze",
    )
    s.add_argument("--no-bins", action="store_true", help="skip the position bins")
    s.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        help="at most N training-length windows per dataset (factor m: N // m; default: all)",
    )
    s.add_argument(
        "--batch", type=positive_int, default=8, help="training-length windows per batch"
    )
    s.add_argument("--device", type=device_arg, default="auto", help=DEVICE_HELP)
    s.add_argument(
        "--data-dir",
        default=None,
        help="the training data cache (default: <run folder's parent>/data)",
    )
    s.add_argument(
        "--store",
        type=store_arg,
        default=paths.store_path(),
        help="experiment store ('' to skip; FIBLAB_STORE sets it)",
    )
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(fn=cmd_eval)


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------
def cmd_efficiency(args) -> int:
    import torch

    from fiblab.cli.argtypes import resolve_device
    from lab.cost.efficiency import efficiency_table
    from lab.lm.modelconfig import ModelConfig, config_for
    from lab.lm.typedconfig import apply_overrides, split_overrides, typed_overrides
    from lab.util import jsonio

    timing = {"--repeats": args.repeats, "--batch": args.batch, "--no-memory": args.no_memory}
    given = [flag for flag, v in timing.items() if v not in (None, False)]
    if given and not args.measure:  # they were ignored, silently
        raise ValueError(f"{' and '.join(given)} apply to --measure: add --measure, or drop them")
    items = split_overrides(args.override)  # ModelConfig fields, with or without "model."
    over = typed_overrides(ModelConfig, {k.removeprefix("model."): v for k, v in items.items()})
    cfg = apply_overrides(config_for(args.preset), over)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    df = efficiency_table(
        cfg,
        args.lengths,
        args.schedules,
        measure=args.measure,
        repeats=args.repeats or 3,
        batch=args.batch or 1,
        device=resolve_device(args.device),
        memory=not args.no_memory,
    )
    if args.json:
        print(
            jsonio.dumps(
                {
                    "attrs": {**df.attrs, "preset": args.preset, "override": over},
                    "rows": df.to_dict(orient="records"),
                },
                indent=1,
            )
        )
        return 0
    a = df.attrs
    print(
        f"preset {args.preset} {over or ''}: d={cfg.d_model} L={cfg.n_layers} "
        f"heads={cfg.n_heads}/{cfg.n_kv_heads}kv D={cfg.head_dim} W={cfg.window} K={cfg.rungs}"
    )
    print(f"attention FLOPs: {a['flops']}; one sequence of length T")
    if args.measure:
        print(
            f"measured on {a['device']}, torch {a['torch']}, {a['threads']} threads, "
            f"FIBLAB_ATTN_IMPL={a['attn_impl_env'] or '(unset)'}, batch "
            f"{a['batch']}, median of {a['repeats']} after a warm-up; x_fixed = latency / "
            f"fixed (same process, round-robin)"
        )
    cols = [
        "T",
        "scheme",
        "cols_min",
        "cols_max",
        "keys_per_query",
        "union",
        "attn_gflop",
        "x_dense",
        "attn_share",
        "attn_gflop_paper",
    ]
    if args.measure:
        cols += [
            "fwd_ms",
            "fwd_tok_s",
            "fwd_x_fixed",
            "fwdbwd_ms",
            "fwdbwd_tok_s",
            "fwdbwd_x_fixed",
        ]
        cols += [] if args.no_memory else ["fwd_peak_mib", "fwdbwd_peak_mib"]
    fmt = {
        "keys_per_query": "{:.2f}".format,
        "attn_gflop": "{:.4g}".format,
        "x_dense": "{:.4f}".format,
        "attn_share": "{:.3f}".format,
        "attn_gflop_paper": "{:.4g}".format,
        "fwd_ms": "{:.1f}".format,
        "fwdbwd_ms": "{:.1f}".format,
        "fwd_tok_s": "{:.0f}".format,
        "fwdbwd_tok_s": "{:.0f}".format,
        "fwd_x_fixed": "{:.2f}".format,
        "fwdbwd_x_fixed": "{:.2f}".format,
        "fwd_peak_mib": "{:.1f}".format,
        "fwdbwd_peak_mib": "{:.1f}".format,
    }
    print(df[cols].to_string(index=False, formatters=fmt))
    return 0


def add_efficiency(subparsers) -> argparse.ArgumentParser:
    """Register ``fiblab efficiency`` on an argparse subparsers object; returns the parser."""
    s = subparsers.add_parser(
        "efficiency",
        help="attention FLOPs, keys per query, coverage, measured speed and memory per scheme",
    )
    add_model_preset(s, "probe-small")
    s.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=None,
        help="sequence lengths (default: the preset's seq_len)",
    )
    s.add_argument(
        "--schedules",
        nargs="+",
        default=list(SCHEMES),
        type=scheme_arg(SCHEMES, "schedule"),
        metavar="SCHEME",
        help=" ".join(SCHEMES) + " (or another spelling: fib-stagger, fib/stagger, …)",
    )
    s.add_argument(
        "--override",
        nargs="*",
        action="extend",
        metavar="KEY=VALUE",
        help="ModelConfig fields, e.g. n_layers=8 rungs=25 (default: the preset's)",
    )
    s.add_argument("--measure", action="store_true", help="also time and measure memory")
    s.add_argument(
        "--repeats",
        type=positive_int,
        default=None,
        help="with --measure: timed repetitions (default: 3)",
    )
    s.add_argument(
        "--batch", type=positive_int, default=None, help="with --measure: batch size (default: 1)"
    )
    s.add_argument("--device", type=device_arg, default="auto", help=DEVICE_HELP)
    s.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="torch CPU threads (default: torch's); 1 is steadier on a loaded machine",
    )
    s.add_argument("--no-memory", action="store_true", help="with --measure: skip peak memory")
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.set_defaults(fn=cmd_efficiency)
    return s
