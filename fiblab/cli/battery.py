"""`fiblab battery RUN [RUN …]`: the RULER / LEGO battery on trained runs, into the store.

Every run is resolved and scored before anything is written, so a bad run name, a folder
without a checkpoint or a model too short for the items is one error line (exit 2) and the
store is left as it was.  Torch is imported inside the command only (`fiblab --help` stays
light).

    fiblab battery cpu-stagger runs/cpu-fixed --n 100 --seed 0 [--json]
"""

from __future__ import annotations

from fiblab.cli.argtypes import DEVICE_HELP, device_arg, store_arg
from lab.util import paths


def format_battery(rb) -> str:
    """A readable table of one run's `probes.battery_run.RunBattery`."""
    first = rb.rows[0] if rb.rows else None
    lines = [
        f"run {rb.name}  step {rb.step}"
        + (f"  n {first.n} per chain length  seed {first.seed}" if first else "")
    ]
    lines.append(
        f"  {'task':<9}{'accuracy':>9}{'correct':>9}{'items':>7}{'chance':>8}{'p (>chance)':>13}"
        f"   label      per chain length"
    )
    for r in rb.rows:
        label = "at chance" if r.at_chance else "above"
        cells = " ".join(f"{k} {v:.3f}" for k, v in r.by_length.items())
        lines.append(
            f"  {r.task:<9}{r.accuracy:>9.3f}{r.correct:>9}{r.items:>7}{r.chance:>8.3f}"
            f"{r.p_value:>13.3g}   {label:<10} {cells}"
        )
    return "\n".join(lines)


def cmd_battery(args) -> int:
    from dataclasses import asdict

    from fiblab.cli.argtypes import resolve_device
    from lab.publish.export import resolve_run
    from lab.util import jsonio
    from probes.battery_run import ensure_run, log_rows, score_run

    if args.n < 1:
        raise ValueError(f"--n {args.n} must be >= 1 (items per chain length), e.g. --n 100")
    if args.seed < 0:
        raise ValueError(f"--seed {args.seed} must be >= 0, e.g. --seed 0")
    device = resolve_device(args.device)
    run_dirs = [resolve_run(r, args.runs) for r in args.runs_]  # every name checked first
    scored = [score_run(d, args.n, args.seed, device) for d in run_dirs]
    if args.store:
        from lab.store import Store

        with Store(args.store) as st:
            for rb in scored:
                ensure_run(st, rb)
                log_rows(st, rb.name, rb.rows)
    if args.json:
        doc = [
            {
                "run": rb.name,
                "run_dir": rb.run_dir,
                "step": rb.step,
                "store": args.store or None,
                "rows": [asdict(r) for r in rb.rows],
            }
            for rb in scored
        ]
        print(jsonio.dumps(doc, indent=1))
    else:
        print("\n\n".join(format_battery(rb) for rb in scored))
        if args.store:
            print(f"\nstored in {args.store} (table battery_results)")
    return 0


def add_battery(subparsers) -> None:
    """Register `fiblab battery RUN [RUN …]` on an argparse subparsers object."""
    s = subparsers.add_parser(
        "battery",
        help="the RULER / LEGO battery (forced choice) on trained runs, into the store",
        description="Score each run's newest good checkpoint on RULER variable tracking and "
        "LEGO over Z/2 (n items per chain length, forced choice), test each task's accuracy "
        "against its chance rate (one-sided binomial test, alpha 0.05: 'at chance' when not "
        "shown above it) and store the results under the run's name, keyed by (run, task, "
        "n, seed): scoring again replaces them.",
    )
    s.add_argument(
        "runs_",
        nargs="+",
        metavar="RUN",
        help="a run folder (runs/NAME) or a run name under --runs",
    )
    s.add_argument("--n", type=int, default=100, help="items per chain length (>= 1)")
    s.add_argument("--seed", type=int, default=0, help="the battery's seed (>= 0)")
    s.add_argument("--device", type=device_arg, default="auto", help=DEVICE_HELP)
    s.add_argument(
        "--store",
        type=store_arg,
        default=paths.store_path(),
        help="experiment store ('' to skip; FIBLAB_STORE sets it)",
    )
    s.add_argument(
        "--runs", default=paths.runs_dir(), help="folder of run directories (FIBLAB_RUNS sets it)"
    )
    s.add_argument("--json", action="store_true", help="print the results as one JSON list")
    s.set_defaults(fn=cmd_battery)
