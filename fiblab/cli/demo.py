"""`fiblab demo`: the main job (and `--scale study`)."""

from __future__ import annotations

from fiblab.cli.argtypes import RUNS_HELP, STORE_HELP, folder_arg, store_arg
from lab.util import paths


def add_demo(sub) -> None:
    """`fiblab demo`: the main job's arguments."""
    s = sub.add_parser("demo", help="the main job: a lab-scale reproduction ending in a report")
    s.add_argument(
        "--scale",
        choices=["full", "smoke", "study", "study-smoke"],
        default="full",
        help="full (≈ 6–20 min on 2 cores, by machine), smoke (≈ 1 min), study (the CPU study of the LM "
        "claims, ≤ 3 h, resumable) or study-smoke (the study's stages in a minute)",
    )
    s.add_argument(
        "--out",
        type=folder_arg,
        default=None,
        help="report folder (default reports/demo; reports/study for study)",
    )
    s.add_argument("--runs", type=folder_arg, default=paths.runs_dir(), help=RUNS_HELP)
    s.add_argument("--store", type=store_arg, default=paths.store_path(), help=STORE_HELP)
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.set_defaults(fn=cmd_demo)


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
