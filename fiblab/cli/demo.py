"""`fiblab demo`: the main job (and `--scale study`)."""

from __future__ import annotations


def cmd_demo(args) -> int:
    """The main job (analysis.experiments.demo.job): coverage, a reduced Table 2 probe, small LMs trained and
    evaluated at 1×/2×/4× length, and a report with the paper's claims checked."""
    from analysis.experiments.demo.job import run_demo

    run_demo(
        args.scale,
        out_dir=args.out,
        runs_dir=args.runs,
        store_path=args.store or None,
        quiet=args.quiet,
    )
    return 0
