"""Subcommands that run or read experiments: probe, train, demo, report."""

from __future__ import annotations

import os
import sys
import time

from fiblab.cli.exports import log_spec


def cmd_probe(args) -> int:
    from dataclasses import replace as dc_replace

    from lab.util import jsonio
    from lab.util.wording import plural
    from probes import grid as G
    from probes.live import StopRequested, write_progress
    from probes.settings import TASK_SCALES

    if args.scale not in TASK_SCALES[args.task]:
        raise ValueError(
            f"scale {args.scale!r} is not defined for the {args.task} task: use one "
            f"of {sorted(TASK_SCALES[args.task])}"
        )
    settings = TASK_SCALES[args.task][args.scale]
    over = {
        k: v
        for k, v in (
            ("steps", args.steps),
            ("batch", args.batch),
            ("lr", args.lr),
            ("log_every", args.log_every),
            ("precision", args.precision),
        )
        if v is not None
    }
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
    cells = G.grid(
        args.mechanisms, args.depths, args.init, args.seeds, args.task, args.distances or (None,)
    )
    from lab.util.paths import runs_dir

    out = args.out or os.path.join(runs_dir(), "probes", f"{args.task}-{args.scale}.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)  # a bad --out fails first
    t0 = time.perf_counter()
    keys = [c.key(settings) for c in cells]
    live = _live_start(args, keys, out)
    keep = _store_writer(args.store, live)
    done = {r["key"]: r for r in G.load_records(out)}
    if not args.json:  # a long grid says how long before it starts
        from fiblab.probe_progress import start_estimate

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
        finished = {r["key"] for r in G.load_records(out)} & set(keys)
        msg = (
            f"stopped by request: {len(finished)} of {plural(len(keys), 'cell')} finished "
            f"(kept in {out}); run the same command again to train the others"
        )
        if live is not None:
            write_progress(live.folder, exit="stopped", message=msg, done=len(finished))
        print(msg)
        return 0
    except BaseException as e:
        if live is not None:
            why = "ended by SIGTERM" if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"
            write_progress(live.folder, exit="failed", message=why)
        raise
    wall = time.perf_counter() - t0
    if live is not None:
        write_progress(
            live.folder,
            exit="done",
            done=len(records),
            message=f"done: {plural(len(records), 'cell')} in {wall:.0f} s",
        )
    if args.json:
        for rec in records:
            print(
                jsonio.dumps(
                    {
                        k: rec[k]
                        for k in (
                            "key",
                            "mechanism",
                            "depth",
                            "init",
                            "seed",
                            "alphas",
                            "acc",
                            "seconds",
                        )
                    }
                )
            )
        return 0
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
        return 0
    from analysis.tables.probe_table import PAPER_MECHANISM, format_table2, table2_rows

    for mech in dict.fromkeys(c.mechanism for c in cells):
        rows = table2_rows(records, mech)
        if rows:
            print(
                f"\nmechanism {mech}"
                + (" (paper's Table 2 beside it)" if mech == PAPER_MECHANISM else "")
            )
            print(format_table2(rows))
    return 0


def _ray_grid(args, cells, settings, out: str, keep, live) -> list[dict]:
    """The grid's cells as Ray tasks (`fiblab.ray_run.run_probe_grid`): records appended to
    ``out`` and kept in the store by this process as each cell returns."""
    from fiblab.cli.sweep import ray_kwargs
    from fiblab.ray_cluster import check_address

    check_address(args.ray)
    if args.jobs > 1:
        raise ValueError(
            f"--jobs {args.jobs} is for a grid run here, not with --ray {args.ray}: drop it "
            f"(Ray runs as many cells at once as the cluster holds; see --ray-threads)"
        )
    from fiblab.ray_run import run_probe_grid

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
            trained[rec["key"]] = {"step_s": now.get("step_s"), "wall_s": wall}
            from probes.live import write_progress

            write_progress(live.folder, trained=trained)

    return keep


def _live_start(args, keys: list[str], out: str):
    """With ``--live DIR``: the grid's progress file and the cells' live spec (`probes.live`);
    SIGTERM then ends the grid through Python, so the progress file says how it ended."""
    if not args.live:
        return None
    import signal

    from probes.live import LiveSpec, write_progress

    def term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, term)
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
        lanes=None,  # a Ray grid's cells at once, once it knows (fiblab.ray_run)
    )
    return LiveSpec(args.live)


def cmd_train(args) -> int:
    from lab.lm.config import split_overrides
    from lab.training.train import TrainingDiverged, train
    from lab.training.trainconfig import config_from_file, make_config

    overrides = split_overrides(args.override)
    for key in ("steps", "data", "tokenizer", "name", "seed", "precision"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if args.config and args.preset:
        raise ValueError(
            f"--preset {args.preset} and --config {args.config}: give one (the config file "
            f"already holds the whole configuration; vary it with --override)"
        )
    if args.config:
        cfg = config_from_file(args.config, overrides)
    elif args.preset:
        from lab.util.paths import runs_dir

        overrides.setdefault("run_dir", runs_dir())  # FIBLAB_RUNS, else runs/
        cfg = make_config(args.preset, overrides)
    else:
        raise ValueError(
            "fiblab train needs --preset NAME (e.g. cpu-stagger) or --config "
            "runs/NAME/config.json (a run's configuration, to re-run or vary it)"
        )
    if cfg.steps < 1:
        raise ValueError(f"steps={cfg.steps} must be an integer >= 1 (optimizer steps)")
    if getattr(args, "ray", None):
        return _train_on_ray(args, cfg)
    try:
        out = train(
            cfg,
            resume=args.resume,
            restart=args.restart,
            store_path=args.store or None,
            quiet=args.quiet,
            log_to=log_spec(args),
        )
    except TrainingDiverged as e:
        print(f"fiblab: training stopped: {e}", file=sys.stderr)
        return 3
    if out.get("status") == "stopped":
        print(
            f"{out['name']}: stopped at step {out.get('stopped_at')} by request; continue it "
            f"with the same command and --resume"
        )
        return 0
    if out["final_ppl"]:
        print(
            f"{out['name']}: final held-out perplexity "
            + ", ".join(f"{k} {v:.3f}" for k, v in out["final_ppl"].items())
            + f"  (run dir {out['run_dir']})"
        )
    return 0


def _train_on_ray(args, cfg) -> int:
    """``fiblab train … --ray ADDRESS``: the run as one Ray task (`fiblab.ray_run.train_on_ray`),
    this process the store's one writer; prints what a local run prints."""
    from fiblab.cli.sweep import ray_kwargs
    from fiblab.ray_cluster import check_address
    from lab.training.train import TrainingDiverged

    check_address(args.ray)
    if args.restart or log_spec(args) is not None:
        raise ValueError(
            f"--restart and --log/--tensorboard are for a run here, not with --ray {args.ray}: "
            f"drop them (on Ray, a run's checkpoints and journal are in its run folder)"
        )
    from fiblab.ray_run import train_on_ray

    try:
        r = train_on_ray(
            cfg, args.store or None, resume=args.resume, progress=not args.quiet, **ray_kwargs(args)
        )
    except TrainingDiverged as e:
        print(f"fiblab: training stopped: {e}", file=sys.stderr)
        return 3
    if r.outcome == "stopped":
        print(
            f"{r.name}: stopped at step {r.stopped_at} by request; continue it with the same "
            f"command and --resume"
        )
        return 0
    if r.final_ppl:
        print(
            f"{r.name}: final held-out perplexity "
            + ", ".join(f"{k} {v:.3f}" for k, v in r.final_ppl.items())
            + f"  (run dir {os.path.join(cfg.run_dir, cfg.name)}; on Ray: {r.outcome})"
        )
    return 0


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


def cmd_report(args) -> int:
    """A Markdown + HTML report of runs in the store (every table and figure that applies), the
    claims ledger first and claims.json beside it; with ``--json`` every table as JSON records
    on stdout (the numbers the Markdown prints) and the ledger under ``claims``."""
    from analysis.ledger import evidence as ledger_evidence
    from analysis.ledger import ledger
    from analysis.reports.results import build_report
    from lab.store import Store
    from lab.util import jsonio
    from probes.grid import load_records

    if not args.out and not getattr(args, "json", False):
        raise ValueError("fiblab report needs --out FOLDER (e.g. reports/NAME), or --json")
    if not os.path.exists(args.store):
        raise ValueError(
            f"experiment store {args.store!r} does not exist: train or probe "
            f"something first, or pass --store"
        )
    records = None
    if args.probes:
        records = []
        for path in args.probes:
            if not os.path.exists(path):
                raise ValueError(f"probe results file {path!r} does not exist")
            records += load_records(path)
    with Store(args.store) as st:
        if args.paper_db and not os.path.exists(args.paper_db):
            raise ValueError(
                f"--paper-db {args.paper_db!r} does not exist (the authors' "
                f"database; a copy ships at ../shared/reference/fib.db)"
            )
        stored = not getattr(args, "no_grids", False)
        grids = ledger_evidence.stored_grids() if stored else []
        timings = ledger_evidence.stored_timings() if stored else []
        led = ledger.build(
            ledger_evidence.from_store(st, records, grids, args.runs or None, timings)
        )
        rep = build_report(
            st,
            args.runs or None,
            records,
            title=args.title,
            dataset=args.dataset,
            paper_db=args.paper_db,
            claims=led,
        )
        paths = rep.write(args.out) if args.out else None
        if paths:
            paths["claims.json"] = led.write_json(os.path.join(args.out, "claims.json"))
    out = sys.stderr if args.json else sys.stdout
    if paths:
        print(f"report: {paths['report.md']} and {paths['report.html']}", file=out)
        print(f"claims: {paths['claims.json']}", file=out)
    print(led.summary(), file=out)
    if args.json:
        tables = rep.records()
        tables["claims"] = led.to_json()
        doc = led.document()
        tables["claims_protocol"] = doc["protocol"]
        tables["claims_protocol_sha256"] = doc["protocol_sha256"]
        tables["claims_summary"] = [
            {"verdict": v, "paper_claims": n} for v, n in led.counts().items()
        ]
        print(jsonio.dumps(tables, indent=1))
    return 0
