"""``fiblab sweep SPEC``: a TOML list of LM training runs on Ray; and the ``--ray`` options that
``fiblab probe`` shares.

Nothing heavy at the top: ray, torch and the lab's training are imported by `cmd_sweep` (and
by `fiblab.cluster.ray_run`), so ``fiblab --help`` stays fast."""

from __future__ import annotations

from fiblab.cli.argtypes import folder_arg, nonneg_int, positive_int, store_arg
from lab.util import paths

GPU_CHOICES = {"auto": None, "1": True, "0": False}


def add_ray_options(s, default: str | None = None) -> None:
    """``--ray ADDRESS`` and the per-task resources on a subcommand that fans out work
    (``default`` None: without --ray the subcommand runs here, as it always did)."""
    from fiblab.cluster.ray_cluster import ADDRESS_HELP

    s.add_argument(
        "--ray",
        default=default,
        metavar="ADDRESS",
        help=ADDRESS_HELP if default is None else ADDRESS_HELP.replace("no Ray", default),
    )
    s.add_argument(
        "--ray-threads",
        type=positive_int,
        default=1,
        metavar="N",
        help="with --ray, on a cluster without GPUs: CPUs (and torch threads) per task; a "
        "node of C cores runs C/N tasks at once (default: 1, the fastest per probe cell on "
        "small CPUs)",
    )
    s.add_argument(
        "--ray-gpus",
        choices=list(GPU_CHOICES),
        default="auto",
        help="with --ray: GPUs per task; auto is 1 when the cluster has GPUs, else 0 "
        "(default: auto)",
    )
    s.add_argument(
        "--ray-retries",
        type=nonneg_int,
        default=3,
        metavar="N",
        help="with --ray: times a task is run again when its worker or node dies; an LM run "
        "resumes from its last checkpoint (default: 3)",
    )


def add_sweep(sub) -> None:
    s = sub.add_parser(
        "sweep",
        help="LM training runs of a TOML spec (presets × seeds × overrides) as Ray tasks",
    )
    s.add_argument(
        "spec",
        help="sweep spec (TOML): sweeps/cpu-matrix.toml, sweeps/paper-matrix.toml, or yours",
    )
    s.add_argument(
        "--runs",
        type=folder_arg,
        default=paths.runs_dir(),
        help="folder of the runs' folders and checkpoints, on storage every node sees, unless "
        "the spec sets run_dir (FIBLAB_RUNS sets it)",
    )
    s.add_argument(
        "--store",
        type=store_arg,
        default=paths.store_path(),
        help="experiment store the driver writes every run into ('' to skip; FIBLAB_STORE sets it)",
    )
    s.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NAME",
        help="run only these runs of the spec (names PRESET-sSEED; default: all)",
    )
    s.add_argument(
        "--list",
        action="store_true",
        help="print the spec's runs (name, preset, seed, folder) and train nothing",
    )
    s.add_argument("--quiet", action="store_true", help="no progress bar or per-run lines")
    add_ray_options(s, default="local")
    s.set_defaults(fn=cmd_sweep)


def ray_kwargs(args) -> dict:
    """The `fiblab.cluster.ray_run` keywords the ``--ray*`` options give."""
    return {
        "address": args.ray,
        "threads": args.ray_threads,
        "retries": args.ray_retries,
        "gpus": GPU_CHOICES[args.ray_gpus],
    }


def cmd_sweep(args) -> int:
    from fiblab.cluster.ray_cluster import check_reachable
    from fiblab.cluster.sweepspec import load_spec, sweep_configs

    check_reachable(args.ray)
    configs = sweep_configs(load_spec(args.spec), args.runs, where=f"sweep spec {args.spec}")
    if args.only:
        names = {c.name for c in configs}
        unknown = sorted(set(args.only) - names)
        if unknown:
            raise ValueError(f"--only {unknown}: not in {args.spec}; its runs: {sorted(names)}")
        configs = [c for c in configs if c.name in set(args.only)]
    if args.list:
        for c in configs:
            print(f"{c.name:<28} {c.preset:<20} seed {c.seed:<4} {c.run_dir}/{c.name}")
        return 0
    from fiblab.cluster.ray_run import run_sweep

    results = run_sweep(configs, args.store or None, progress=not args.quiet, **ray_kwargs(args))
    for r in results:
        ppl = ", ".join(f"{k} {v:.3f}" for k, v in r.final_ppl.items()) or "-"
        print(f"{r.name:<28} {r.outcome:<9} final ppl {ppl}")
    return 0
