"""`fiblab probe`: a retrieval-probe grid, here or on Ray, resumable, live to a notebook."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from fiblab.cli.argtypes import nonneg_int, positive_float, positive_int, scheme_arg, store_arg
from fiblab.cli.choices import MECHANISMS
from fiblab.cli.exports import add_log_options, log_spec
from fiblab.cli.sweep import add_ray_options
from lab.util import paths


def add_probe(sub) -> None:
    """`fiblab probe`: the task, the grid (mechanisms, depths, inits, seeds), its scale and where results go."""
    s = sub.add_parser("probe", help="retrieval probes (the paper's Table 2 grid)")
    s.add_argument(
        "task",
        choices=["marked", "shift", "kv"],
        help="marked two-distance copy (Table 2), shift copy, or key-value retrieval",
    )
    s.add_argument(
        "--distances",
        type=int,
        nargs="+",
        default=None,
        help="shift: trained distances, one cell each (default: none; shift needs them)",
    )
    s.add_argument(
        "--mechanisms",
        nargs="+",
        default=["blur"],
        type=scheme_arg(MECHANISMS, "mechanism"),
        help=" ".join(MECHANISMS) + " (or another spelling: stagger, fib/stagger, …)",
    )
    s.add_argument(
        "--depths", type=positive_int, nargs="+", default=[2, 4, 8], help="layers per model"
    )
    s.add_argument(
        "--init",
        nargs="+",
        default=["uniform", "staggered"],
        help="learned α's initialisation: uniform and/or staggered",
    )
    s.add_argument(
        "--seeds", type=nonneg_int, nargs="+", default=[0, 1], help="seeds, one cell each"
    )
    s.add_argument(
        "--scale",
        choices=["paper", "quick", "demo", "tiny"],
        default="paper",
        help="named settings (steps, batch, model size)",
    )
    s.add_argument(
        "--steps", type=positive_int, default=None, help="training steps (default: the scale's)"
    )
    s.add_argument(
        "--batch", type=positive_int, default=None, help="batch size (default: the scale's)"
    )
    s.add_argument(
        "--lr", type=positive_float, default=None, help="learning rate (default: the scale's)"
    )
    s.add_argument(
        "--log-every",
        type=positive_int,
        default=None,
        help="log α and loss every N steps (default: the scale's)",
    )
    s.add_argument(
        "--marker-distances",
        type=int,
        nargs="+",
        default=None,
        metavar="D",
        help="marked: the marker distances, one marker each (default: the scale's, e.g. 200 "
        "350 at paper scale)",
    )
    s.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default=None,
        help="auto (default): bf16 on CUDA, fp32 on a CPU (probe cells are keyed by precision; "
        "results then match across CPUs); bf16: forward under bfloat16 autocast, as the "
        "paper's GPU probes (faster on CPUs with bf16 units, ≈ 20× slower without)",
    )
    s.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="cells run at once, in worker processes of cores/jobs threads each",
    )
    s.add_argument(
        "--out",
        default=None,
        help="results JSONL (resumable); default <runs>/probes/TASK-SCALE.jsonl, <runs> being "
        "FIBLAB_RUNS or runs/",
    )
    s.add_argument("--json", action="store_true", help="one JSON record per cell on stdout")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument(
        "--store",
        type=store_arg,
        default=paths.store_path(),
        help="experiment store to log each record into as its cell finishes ('' to skip; "
        "FIBLAB_STORE sets it)",
    )
    s.add_argument(
        "--live",
        default=None,
        metavar="DIR",
        help="folder for live progress (progress.json, live/*.json per running cell) and the "
        "stop request: touch DIR/STOP and the running cells are abandoned, finished ones kept "
        "(default: none; fiblab.jobs.probe_launch sets it)",
    )
    add_log_options(s)
    add_ray_options(s)
    s.set_defaults(fn=cmd_probe)


def cmd_probe(args) -> int:
    """Train the grid's missing cells (each record kept as it finishes), then print them."""
    from lab.util.paths import runs_dir
    from lab.util.wording import plural
    from probes import grid as G
    from probes.live import StopRequested, write_progress

    settings = _settings(args)
    if getattr(args, "ray", None):  # before the start estimate times a step
        _check_ray_args(args)
    cells = G.grid(
        args.mechanisms, args.depths, args.init, args.seeds, args.task, args.distances or (None,)
    )
    out = args.out or os.path.join(runs_dir(), "probes", f"{args.task}-{args.scale}.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)  # a bad --out fails first
    done = _earlier_records(out)
    t0 = time.perf_counter()
    keys = [c.key(settings) for c in cells]
    live = _live_start(args, keys, out)
    keep = _store_writer(args.store, live)
    if not args.json:  # a long grid says how long before it starts
        from fiblab.jobs.probe_progress import start_estimate

        todo = [c for c, k in zip(cells, keys) if k not in done]
        line = start_estimate(todo, settings, args.scale, args.task, args.jobs or 1)
        if line:
            print(line, flush=True)
    earlier = _store_writer(args.store)
    for key in keys:  # finished earlier: in the store before anything new is trained
        if key in done:
            earlier(done[key])
    try:
        if getattr(args, "ray", None):  # cells as Ray tasks; this process alone writes
            records = _ray_grid(args, cells, settings, out, keep, live)
        else:
            records = G.run_grid(
                cells,
                settings,
                out,
                progress=not args.no_progress,
                on_record=keep,  # each cell in the store as it finishes: a stop keeps them
                jobs=args.jobs,
                log_to=log_spec(args),
                live=live,
            )
    except StopRequested:
        with _TERM.held():  # its end is written first
            finished = {r["key"] for r in G.load_records(out)} & set(keys)
            msg = (
                f"stopped by request: {len(finished)} of {plural(len(keys), 'cell')} finished "
                f"(kept in {out}); run the same command again to train the others"
            )
            if live is not None:
                write_progress(live.folder, exit="stopped", message=msg, done=len(finished))
            print(msg, flush=True)
        return 0
    except BaseException as e:
        if live is not None:
            why = "ended by SIGTERM" if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"
            write_progress(live.folder, exit="failed", message=why)
        raise
    wall = time.perf_counter() - t0
    with _TERM.held():
        if live is not None:
            what = f"done: {plural(len(records), 'cell')} in {wall:.0f} s"
            write_progress(live.folder, exit="done", done=len(records), message=what)
    _print_records(args, cells, records, settings, out, wall)
    return 0


class _Term:
    """A grid's SIGTERM (with ``--live``: `fiblab.jobs.probe_launch.terminate`) ends it through
    Python, so its progress file says how it ended — except while that end is being written
    (`held`: a stop served, or every cell finished): a SIGTERM then (milliseconds after a stop)
    ended it with no end, and a stopped grid read "failed".  It waits for the end, then ends
    the process as it would have.  The handler runs in the main thread, whichever thread the
    signal reached."""

    def __init__(self):
        self.holding = self.pending = False

    def __call__(self, signum, frame):
        if self.holding:
            self.pending = True
            return
        raise SystemExit(128 + signum)

    @contextlib.contextmanager
    def held(self):
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
            if self.pending:
                raise SystemExit(128 + signal.SIGTERM)


_TERM = _Term()


def _earlier_records(out: str) -> dict[str, dict]:
    """{key: record} of the cells ``out`` holds already (a grid continues there)."""
    from probes import grid as G

    try:
        recs = G.results_records(out)
    except ValueError as e:
        raise ValueError(
            f"--out {e}: give a new .jsonl path, or an earlier grid's results to continue it"
        ) from None
    return {r["key"]: r for r in recs}


def _settings(args):
    """The task's settings at ``--scale`` with the command line's overrides, resolved (auto →
    this CPU's precision); ValueError naming the flag for a combination the task refuses."""
    from dataclasses import replace as dc_replace

    from probes.settings import TASK_SCALES

    if args.scale not in TASK_SCALES[args.task]:
        raise ValueError(
            f"scale {args.scale!r} is not defined for the {args.task} task: use one "
            f"of {sorted(TASK_SCALES[args.task])}"
        )
    settings = TASK_SCALES[args.task][args.scale]
    flags = ("steps", "batch", "lr", "log_every", "precision")
    over = {k: getattr(args, k) for k in flags if getattr(args, k) is not None}
    if args.marker_distances:
        if args.task != "marked":
            raise ValueError(
                f"--marker-distances is for the marked task, not {args.task}: use --distances "
                f"for shift's trained distances"
            )
        over["task"] = dc_replace(settings.task, distances=tuple(args.marker_distances))
    settings = dc_replace(settings, **over).resolved()  # auto → this CPU's; bf16 may warn
    if args.task == "shift" and not args.distances:
        raise ValueError("probe shift needs --distances (the trained distances, e.g. 89 233 350)")
    return settings


_JSON_FIELDS = ("key", "mechanism", "depth", "init", "seed", "alphas", "acc", "seconds")


def _print_records(args, cells, records, settings, out: str, wall: float) -> None:
    """The grid's records: one JSON line each (``--json``), else where they are and, per
    mechanism, the marked task's Table 2 (the paper's beside it) or one line a cell."""
    from lab.util import jsonio
    from lab.util.wording import plural

    if args.json:
        for rec in records:
            print(jsonio.dumps({k: rec[k] for k in _JSON_FIELDS}))
        return
    print(
        f"results: {out}  ({plural(len(records), 'cell')}, settings: steps={settings.steps} "
        f"batch={settings.batch} lr={settings.lr} precision={settings.precision}; "
        f"this run: {wall:.0f} s wall, "
        + (f"ray={args.ray})" if getattr(args, "ray", None) else f"jobs={args.jobs})")
    )
    if args.task != "marked":
        for rec in records:
            accs = " ".join(f"{d}:{a:.2f}" for d, a in rec["acc"].items())
            print(
                f"{rec['key']:<55} alpha {min(rec['alphas']):.3f}-{max(rec['alphas']):.3f}"
                f"  acc {accs}"
            )
        return
    from analysis.tables.probe_table import PAPER_MECHANISM, format_table2, table2_rows

    for mech in dict.fromkeys(c.mechanism for c in cells):
        rows = table2_rows(records, mech)
        if rows:
            print(
                f"\nmechanism {mech}"
                + (" (paper's Table 2 beside it)" if mech == PAPER_MECHANISM else "")
            )
            print(format_table2(rows))


def _ray_grid(args, cells, settings, out: str, keep, live) -> list[dict]:
    """The grid's cells as Ray tasks (`fiblab.cluster.ray_run.run_probe_grid`): records appended to
    ``out`` and kept in the store by this process as each cell returns."""
    from fiblab.cli.sweep import ray_kwargs
    from fiblab.cluster.ray_run import run_probe_grid

    return run_probe_grid(
        cells,
        settings,
        out,
        progress=not args.no_progress,
        on_record=keep,
        log_to=log_spec(args),  # --log / --live folders: on storage the nodes share
        live=live,
        **ray_kwargs(args),
    )


def _check_ray_args(args) -> None:
    """A ValueError for a bad ``--ray`` address, or ``--jobs`` beside it."""
    from fiblab.cluster.ray_cluster import check_reachable

    check_reachable(args.ray)
    if args.jobs > 1:
        raise ValueError(
            f"--jobs {args.jobs} is for a grid run here, not with --ray {args.ray}: drop it "
            f"(Ray runs as many cells at once as the cluster holds; see --ray-threads)"
        )


def _store_writer(store: str, live=None):
    """A callable run as each cell finishes: log its record into ``store`` ('' for none — the
    grid process is the store's one writer; a notebook watching it only reads) and, with
    ``live``, note in progress.json the cell's measured seconds per step (for the ETA)."""
    trained: dict[str, dict] = {}

    def keep(rec: dict) -> None:
        if store:
            from lab.store import Store

            with Store(store) as st:
                st.log_probe(rec)  # upsert: re-logging replaces
        if live is not None:
            now = live.read(rec["key"]) or {}
            wall = time.time() - now["started"] if now.get("started") else None
            trained[rec["key"]] = {
                "step_s": now.get("step_s"),
                "wall_s": wall,
                "started": now.get("started"),  # which cells built the kernel (the ETA's)
                "first_step_at": now.get("first_step_at"),
            }
            from probes.live import write_progress

            write_progress(live.folder, trained=trained)

    return keep


def _live_start(args, keys: list[str], out: str):
    """With ``--live DIR``: the grid's progress file and the cells' live spec (`probes.live`);
    SIGTERM then ends the grid through Python (`_Term`), so the progress file says how it ended."""
    if not args.live:
        return None
    from probes.live import LiveSpec, write_progress

    signal.signal(signal.SIGTERM, _TERM)
    write_progress(
        args.live,
        pid=os.getpid(),
        keys=keys,
        total=len(keys),
        jobs=args.jobs,
        out=os.path.abspath(out),
        phase="running",
        exit=None,
        message="",
        started=time.time(),
        lanes=None,  # a Ray grid's cells at once, once it knows (fiblab.cluster.ray_run)
    )
    return LiveSpec(args.live)
