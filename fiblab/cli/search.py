"""`fiblab search SPACE --objective …`: an Optuna search over per-layer α schedules.

Nothing heavy at the top: Optuna, torch and the lab's models are imported by `cmd_search`.
"""

from __future__ import annotations

import os
import sys

from fiblab.cli.argtypes import folder_arg, positive_int, store_arg
from fiblab.cli.sweep import add_ray_options
from lab.util import paths

#: The probe objective's convention when none is given: the tiny marked-copy probe's.
PROBE_CONVENTION = {"layers": 2, "window": 2, "rungs": 6, "seq_len": 48}
LM_CONVENTION = {"layers": 2, "window": 2, "rungs": 8, "seq_len": 64}  # the tiny LM preset's
PAPER_CONVENTION = {"layers": 16, "window": 8, "rungs": 15, "seq_len": 1024}


def add_search(subparsers) -> None:
    """Register `fiblab search SPACE …` on an argparse subparsers object (calls args.fn)."""
    s = subparsers.add_parser(
        "search",
        help="search per-layer alpha schedules with Optuna (TPE; NSGA-II for several objectives)",
        description="Search per-layer alpha schedules: SPACE is linear (alpha at the first and "
        "last layer), coprime (stride), free (one alpha per layer), optionally +base "
        "(fib/pow2) and/or +window (W), e.g. free+base.  Objectives: distinct, band, reach "
        "(cheap counts), probe (marked-copy accuracy), ppl (a short LM run's held-out perplexity).  Every trial goes into the "
        "experiment store (runs of kind 'search'); the winners are re-run on fresh seeds "
        "beside the stagger and coprime schedules.  With --ray ADDRESS the trials run as Ray tasks.",
    )
    s.add_argument("space", help="linear | coprime | free, optionally +base and/or +window")
    s.add_argument(
        "--objective",
        nargs="+",
        default=["distinct"],
        help="one or more of distinct, band, reach, probe, ppl (several: a Pareto front)",
    )
    s.add_argument("--trials", type=positive_int, default=40, help="finished trials in the study")
    s.add_argument("--seed", type=int, default=0, help="sampler seed and the trials' model seed")
    s.add_argument(
        "--storage",
        default=None,
        help="Optuna storage URL, '' for in memory (default: sqlite:///RUNS/search.db)",
    )
    s.add_argument("--study", default=None, help="study name (default: from space, objectives…)")
    for name, what in (
        ("layers", "layers L"),
        ("window", "dense window W"),
        ("rungs", "Fibonacci rungs K"),
        ("seq-len", "sequence length T"),
    ):
        key = name.replace("-", "_")
        s.add_argument(
            f"--{name}",
            type=int,
            default=None,
            help=f"{what} (default: {PAPER_CONVENTION[key]}, or {PROBE_CONVENTION[key]} with "
            f"--objective probe, {LM_CONVENTION[key]} with ppl)",
        )
    s.add_argument("--max-window", type=positive_int, default=16, help="largest W of +window")
    s.add_argument(
        "--distances", type=positive_int, nargs="+", default=[5, 13], help="probe distances"
    )
    s.add_argument("--probe-scale", default="tiny", help="probe scale (probes.settings.SCALES)")
    s.add_argument(
        "--probe-steps",
        type=positive_int,
        default=None,
        help="probe training steps (default: the scale's)",
    )
    s.add_argument("--lm-preset", default="tiny", help="training preset of the ppl objective")
    s.add_argument(
        "--lm-steps", type=positive_int, default=None, help="LM steps (default: the preset's)"
    )
    s.add_argument(
        "--no-prune",
        action="store_true",
        help="no median pruner on the probe (with --ray there is none: a trial's intermediate "
        "values stay on its worker)",
    )
    s.add_argument(
        "--jobs", type=positive_int, default=1, help="trials at once (local process pool)"
    )
    s.add_argument("--top", type=positive_int, default=3, help="winners re-run on fresh seeds")
    s.add_argument("--rerun-seeds", type=positive_int, default=3, help="fresh seeds per winner")
    s.add_argument(
        "--runs", type=folder_arg, default=paths.runs_dir(), help="folder for the default storage"
    )
    s.add_argument(
        "--store", type=store_arg, default=paths.store_path(), help="experiment store ('' to skip)"
    )
    s.add_argument("--quiet", action="store_true", help="no line per trial")
    add_ray_options(s)
    s.add_argument(
        "--ray-parallel",
        type=positive_int,
        default=None,
        metavar="N",
        help="with --ray: trials in flight at once (default: the cluster's task slots); the "
        "driver tells Optuna each result as it returns and writes the store.  On Ray there is "
        "no median pruner, and a trial whose worker dies --ray-retries times (a trained trial "
        "starts again from scratch) or whose objective raises is told failed, the search going "
        "on",
    )
    s.set_defaults(fn=cmd_search)


def build_config(args):
    """The `SearchConfig` of parsed arguments (a ValueError names a bad SPACE or objective)."""
    from analysis.experiments.search.objectives import LMSpec, ProbeSpec, parse_objectives
    from analysis.experiments.search.search import SearchConfig
    from analysis.experiments.search.space import parse_space

    objectives = parse_objectives(args.objective)
    probe = any(o.name == "probe" for o in objectives)
    lm = any(o.name == "ppl" for o in objectives)
    defaults = PROBE_CONVENTION if probe else LM_CONVENTION if lm else PAPER_CONVENTION
    conv = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in defaults.items()}
    space = parse_space(args.space, max_window=args.max_window, **conv)
    storage = args.storage
    if storage is None:
        os.makedirs(args.runs, exist_ok=True)
        storage = "sqlite:///" + os.path.abspath(os.path.join(args.runs, "search.db"))
    return SearchConfig(
        space=space,
        objectives=objectives,
        trials=args.trials,
        seed=args.seed,
        storage=storage or None,
        study_name=args.study,
        probe=ProbeSpec(args.probe_scale, tuple(args.distances), args.probe_steps),
        lm=LMSpec(args.lm_preset, args.lm_steps),
        prune=not args.no_prune,
        jobs=args.jobs,
    )


def _search(cfg, args, store, log):
    """The study run here, or with ``--ray`` as Ray tasks (`fiblab.cluster.ray_search`)."""
    from analysis.experiments.search.search import run_search

    if not args.ray:
        return run_search(cfg, store=store, log=log)
    from fiblab.cli.sweep import ray_kwargs
    from fiblab.cluster.ray_search import run_search_on_ray

    return run_search_on_ray(
        cfg, store=store, log=log, parallel=args.ray_parallel, **ray_kwargs(args)
    )


def check_ray_args(args) -> None:
    """One-line errors for ``--ray`` options that do not fit together, before any work."""
    if not args.ray:
        if args.ray_parallel is not None:
            raise ValueError(
                f"--ray-parallel {args.ray_parallel} needs --ray ADDRESS: add --ray local, "
                f"or use --jobs for trials at once here"
            )
        return
    from fiblab.cluster.ray_cluster import check_reachable

    check_reachable(args.ray)
    if args.jobs > 1:
        raise ValueError(
            f"--jobs {args.jobs} is for trials run here, not with --ray {args.ray}: drop it "
            f"(Ray runs as many trials at once as the cluster holds; see --ray-parallel)"
        )


def cmd_search(args) -> int:
    check_ray_args(args)
    cfg = build_config(args)
    from analysis.experiments.search.report import compare, format_compare, rerun
    from lab.store import Store

    log = None if args.quiet else (lambda line: print(line, file=sys.stderr))
    store = Store(args.store) if args.store else None
    try:
        res = _search(cfg, args, store, log)
        print(
            f"study {res.study_name}: {len(res.study.trials)} trials in {cfg.storage or 'memory'}"
        )
        rows = rerun(cfg, res, store=store, top=args.top, seeds=args.rerun_seeds, log=log)
        print(format_compare(compare(rows, cfg)))
        for label in dict.fromkeys(r["label"] for r in rows):
            r = next(x for x in rows if x["label"] == label)
            print(
                f"{label:<10} {r['base']} W={r['window']} alpha "
                + " ".join(f"{a:.3f}" for a in r["alphas"])
            )
    finally:
        if store is not None:
            store.close()
    return 0
