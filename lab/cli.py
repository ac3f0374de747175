"""`fiblab` command line.

    fiblab demo [--scale full|smoke] [--out reports/demo]    the main job (see README)
    fiblab report [RUN ...] --out reports/NAME              tables + figures of runs in the store
    fiblab eval RUN_DIR [--factors 1 2 4 8]                 perplexity, extrapolation, position bins
    fiblab efficiency [--preset probe-small] [--measure]    attention FLOPs, keys/query, tokens/s
    fiblab selfcheck [--preset paper-60m] [--seq-len 1024]   build the model, run every path
    fiblab offsets --alpha 0.5 --window 8 [--base pow2] [--rounding floor] [--interp]
    fiblab schedule stagger --layers 16 [--window 8] [--seq-len 1024] [--sets]
    fiblab params [--preset paper-60m] [--schedule learned]
    fiblab coverage --layers 16 --window 8 --rungs 15 --seq-len 1024 --schedule stagger [--json]
    fiblab receptive-field --layers 16 --schedule coprime [--residual 0.5] [--json]
    fiblab probe marked --depths 2 4 8 --init uniform staggered --seeds 0 1 [--scale quick] [--jobs 2] [--precision bf16]
    fiblab train --preset cpu-stagger [--data bible] [--steps N] [--override key=value ...] [--resume]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def _base_arg(text: str):
    if text in ("fib", "pow2"):
        return text
    try:
        return tuple(float(x) if "." in x else int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"base {text!r}: use fib, pow2 or a comma list like 1,3,9")


def _schedule_arg(text: str):
    if "," in text:
        return tuple(float(x) for x in text.split(","))
    return text


# --------------------------------------------------------------------------------------------
def cmd_selfcheck(args) -> int:
    from lab.model import build_model
    torch.manual_seed(0)
    ref = build_model(args.preset)
    cfg = ref.cfg
    T = args.seq_len or cfg.seq_len
    print(f"preset {args.preset}: d={cfg.d_model} L={cfg.n_layers} heads={cfg.n_heads}/"
          f"{cfg.n_kv_heads}kv vocab={cfg.vocab_size} seq_len={cfg.seq_len} W={cfg.window}")
    print(f"parameters: {ref.num_params():,} (non-embedding {ref.num_params(True):,}); "
          f"learned alpha adds {cfg.n_layers} theta scalars")
    ids = torch.randint(0, cfg.vocab_size, (1, T + 1), generator=torch.Generator().manual_seed(1))
    x, y = ids[:, :-1], ids[:, 1:]
    variants = [
        ("dense", dict(attention="dense")),
        ("fixed / mask", dict(path="mask")),
        ("fixed / shift", dict(path="shift")),
        ("fixed / interp", dict(path="interp")),
        ("stagger / mask", dict(schedule="stagger", path="mask")),
        ("stagger / shift", dict(schedule="stagger", path="shift")),
        ("coprime / shift", dict(schedule="coprime", path="shift")),
        ("pow2 stagger / shift", dict(base="pow2", schedule="stagger", path="shift")),
        ("learned / interp", dict(schedule="learned")),
    ]
    state = ref.state_dict()
    losses = {}
    print(f"\nforward + backward, B=1, T={T}:")
    print(f"{'variant':<22}{'loss':>10}{'grad norm':>12}{'seconds':>10}")
    for name, over in variants:
        model = build_model(args.preset, **over)
        model.load_state_dict(state, strict=False)
        t0 = time.perf_counter()
        _, loss = model(x, y)
        loss.backward()
        dt = time.perf_counter() - t0
        gn = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()
                                     if p.grad is not None]))
        if not (torch.isfinite(loss) and torch.isfinite(gn)):
            print(f"FAILED: {name} gave a non-finite loss or gradient")
            return 1
        losses[name] = loss.item()
        extra = ""
        if model.cfg.learned:
            g = [b.attn.theta.grad.item() for b in model.blocks]
            extra = f"   dL/dtheta layer0={g[0]:+.2e}"
        print(f"{name:<22}{loss.item():>10.5f}{gn.item():>12.4f}{dt:>10.2f}{extra}")
    checks = [("fixed / mask", "fixed / shift"), ("fixed / mask", "fixed / interp"),
              ("stagger / mask", "stagger / shift")]
    for a, b in checks:
        diff = abs(losses[a] - losses[b])
        ok = diff < 1e-4
        print(f"{'OK ' if ok else 'BAD'} {a} vs {b}: |dloss| = {diff:.2e}")
        if not ok:
            return 1
    print("\nselfcheck passed")
    return 0


def cmd_offsets(args) -> int:
    from lab.attention import column_plan
    from lab.offsets import attended_distances
    if args.interp:
        cols = column_plan(torch.tensor(args.alpha, dtype=torch.float64), args.window,
                           args.seq_len, args.base, args.rungs, reach=args.reach, interpolate=True)
        print(f"interpolated columns (alpha={args.alpha}, W={args.window}, T={args.seq_len}, "
              f"paper's skip rule): {len(cols)}")
        for lo, frac in cols[args.window + 1:]:
            print(f"  lo={lo:<6} frac={float(frac):.4f}")
        return 0
    d = attended_distances(args.alpha, args.window, args.seq_len, args.base, args.rungs,
                           args.rounding, args.reach)
    print(f"attended distances (alpha={args.alpha}, W={args.window}, T={args.seq_len}, "
          f"base={args.base}, rounding={args.rounding}, window counted): {len(d)}")
    print(" ".join(map(str, d)))
    return 0


def cmd_schedule(args) -> int:
    from lab.offsets import attended_distances
    from lab.schedules import coprime_stride, layer_alphas
    alphas = layer_alphas(args.schedule, args.layers, stride=args.stride)
    if args.schedule in ("coprime", "hdc"):
        print(f"coprime stride S = {args.stride or coprime_stride(args.layers)}")
    union: set[int] = set()
    for ell, a in enumerate(alphas):
        d = attended_distances(a, args.window, args.seq_len, args.base, args.rungs, args.rounding)
        union.update(d)
        line = f"layer {ell:>2}  alpha={a:.4f}  |set|={len(d)}"
        if args.sets:
            line += "  rungs: " + " ".join(str(x) for x in d if x > args.window)
        print(line)
    print(f"union over layers: {len(union)} distinct distances (window counted; "
          f"{len([u for u in union if u > args.window])} beyond it), rounding={args.rounding}")
    return 0


def cmd_params(args) -> int:
    from lab.model import build_model
    over = {"schedule": args.schedule} if args.schedule else {}
    m = build_model(args.preset, **over)
    print(f"{m.num_params():,} parameters ({m.num_params(True):,} non-embedding)")
    return 0


def cmd_coverage(args) -> int:
    from probes.coverage import describe, schedule_coverage
    report = schedule_coverage(args.alphas or args.schedule, args.layers, args.window,
                               args.seq_len, args.base, args.rungs, args.rounding, args.band,
                               args.stride)
    if args.json:
        if not args.full:
            for key in ("layers_per_distance", "per_layer_sets"):
                report.pop(key)
        print(json.dumps(report))
        return 0
    print(describe(report))
    for ell, (a, n, b) in enumerate(zip(report["alphas"], report["per_layer"],
                                        report["band_coverage_per_layer"])):
        extra = report["beyond_reach"][ell]
        print(f"  layer {ell:>2} alpha={a:.4f} |set|={n:>3} band={100 * b:5.1f}%"
              + (f"  untrained at longer T: {extra}" if extra else ""))
    g = report["gaps"]
    print(f"gaps outside the ±{args.band if args.band is not None else args.window} band: "
          f"{len(g)}" + (f" (first: {g[:5]})" if g else ""))
    return 0


def cmd_receptive_field(args) -> int:
    from probes.coverage import layer_sets
    from probes.receptive_field import receptive_report, scheme_sets
    from lab.schedules import layer_alphas
    schemes = args.schemes or [args.schedule]
    out = {}
    for name in schemes:
        if args.alphas:
            sets = layer_sets(layer_alphas(args.alphas, args.layers), args.window, args.seq_len,
                              args.base, args.rungs, args.rounding)
        elif args.base == "pow2" and not name.startswith("pow2") and name != "dense":
            sets = layer_sets(layer_alphas(name, args.layers), args.window, args.seq_len,
                              "pow2", args.rungs, args.rounding)
        else:
            sets = scheme_sets(name, args.layers, args.window, args.seq_len, args.rungs,
                               args.rounding)
        out[name] = receptive_report(sets, args.seq_len, args.residual)
    convention = dict(layers=args.layers, window=args.window, rungs=args.rungs,
                      seq_len=args.seq_len, base=args.base, rounding=args.rounding,
                      residual=args.residual)
    if args.json:
        if len(out) == 1:
            print(json.dumps({"scheme": schemes[0], "convention": convention,
                              **next(iter(out.values()))}))
        else:
            print(json.dumps({"convention": convention, "schemes": out}))
        return 0
    print(f"convention: {convention}")
    print(f"{'scheme':<14}" + "".join(f"{'l' + str(i + 1):>7}" for i in range(args.layers))
          + f"{'max hops':>10}{'mean dist':>11}")
    for name, r in out.items():
        print(f"{name:<14}" + "".join(f"{f:>7.3f}" for f in r["reachable_fraction"])
              + f"{r['max_min_hops']:>10}{r['effective_mean_distance']:>11.1f}")
    print("(reachable share of distances 0..T-1 after each layer)")
    return 0


def cmd_probe(args) -> int:
    from dataclasses import replace as dc_replace
    from probes import retrieval as R
    if args.scale not in R.TASK_SCALES[args.task]:
        raise ValueError(f"scale {args.scale!r} is not defined for the {args.task} task: use one "
                         f"of {sorted(R.TASK_SCALES[args.task])}")
    settings = R.TASK_SCALES[args.task][args.scale]
    over = {k: v for k, v in (("steps", args.steps), ("batch", args.batch), ("lr", args.lr),
                              ("precision", args.precision)) if v is not None}
    settings = dc_replace(settings, **over)
    if args.task == "shift" and not args.distances:
        raise ValueError("probe shift needs --distances (the trained distances, e.g. 89 233 350)")
    cells = R.grid(args.mechanisms, args.depths, args.init, args.seeds, args.task,
                   args.distances or (None,))
    out = args.out or f"runs/probes/{args.task}-{args.scale}.jsonl"
    t0 = time.perf_counter()
    records = R.run_grid(cells, settings, out, progress=not args.no_progress, jobs=args.jobs)
    wall = time.perf_counter() - t0
    if args.store:
        from lab.store import Store
        with Store(args.store) as store:
            for rec in records:
                store.log_probe(rec)                         # upsert: re-logging replaces
    if args.json:
        for rec in records:
            print(json.dumps({k: rec[k] for k in ("key", "mechanism", "depth", "init", "seed",
                                                  "alphas", "acc", "seconds")}))
        return 0
    print(f"results: {out}  ({len(records)} cells, settings: steps={settings.steps} "
          f"batch={settings.batch} lr={settings.lr} precision={settings.precision}; "
          f"this run: {wall:.0f} s wall, jobs={args.jobs})")
    if args.task != "marked":
        for rec in records:
            accs = " ".join(f"{d}:{a:.2f}" for d, a in rec["acc"].items())
            print(f"{rec['key']:<55} alpha {min(rec['alphas']):.3f}-{max(rec['alphas']):.3f}"
                  f"  acc {accs}")
        return 0
    for mech in args.mechanisms:
        rows = R.table2(records, mech)
        if rows:
            print(f"\nmechanism {mech}" + (" (paper's Table 2 beside it)" if mech == "blur" else ""))
            print(R.format_table2(rows))
    return 0


def parse_overrides(items, hint: str) -> dict[str, str]:
    """``["key=value", …]`` (from ``--override``) as a dict of strings; the caller types them."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r}: {hint}")
        out[key] = value
    return out


def cmd_train(args) -> int:
    from lab.train import TrainingDiverged, make_config, train
    overrides = parse_overrides(args.override, "write key=value (model fields as model.key)")
    for key in ("steps", "data", "name", "seed"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    cfg = make_config(args.preset, overrides)
    try:
        out = train(cfg, resume=args.resume, store_path=args.store or None, quiet=args.quiet)
    except TrainingDiverged as e:
        print(f"fiblab: training stopped: {e}", file=sys.stderr)
        return 3
    if out.get("status") == "stopped":
        print(f"{out['name']}: stopped at step {out.get('stopped_at')} by request; continue it "
              f"with the same command and --resume")
        return 0
    if out["final_ppl"]:
        print(f"{out['name']}: final held-out perplexity " + ", ".join(
            f"{k} {v:.3f}" for k, v in out["final_ppl"].items()) + f"  (run dir {out['run_dir']})")
    return 0


def cmd_demo(args) -> int:
    """The main job (analysis.demo): coverage, a reduced Table 2 probe, small LMs trained and
    evaluated at 1×/2×/4× length, and a report with the paper's claims checked."""
    from analysis.demo import run_demo
    run_demo(args.scale, out_dir=args.out, runs_dir=args.runs, store_path=args.store or None,
             quiet=args.quiet)
    return 0


def cmd_report(args) -> int:
    """A Markdown + HTML report of runs in the store (every table and figure that applies)."""
    from analysis.results import build_report
    from lab.store import Store
    from probes.retrieval import load_records
    import os
    if not os.path.exists(args.store):
        raise ValueError(f"experiment store {args.store!r} does not exist: train or probe "
                         f"something first, or pass --store")
    records = None
    if args.probes:
        records = []
        for path in args.probes:
            if not os.path.exists(path):
                raise ValueError(f"probe results file {path!r} does not exist")
            records += load_records(path)
    with Store(args.store) as st:
        if args.paper_db and not os.path.exists(args.paper_db):
            raise ValueError(f"--paper-db {args.paper_db!r} does not exist (the authors' "
                             f"database; a copy ships at ../shared/reference/fib.db)")
        rep = build_report(st, args.runs or None, records, title=args.title,
                           dataset=args.dataset, paper_db=args.paper_db)
        paths = rep.write(args.out)
    print(f"report: {paths['report.md']} and {paths['report.html']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fiblab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("demo", help="the main job: a lab-scale reproduction ending in a report")
    s.add_argument("--scale", choices=["full", "smoke"], default="full",
                   help="full (≈6–8 min on 2 cores) or smoke (seconds)")
    s.add_argument("--out", default="reports/demo", help="report folder")
    s.add_argument("--runs", default="runs", help="folder for run directories and probe results")
    s.add_argument("--store", default="runs/fiblab.db", help="experiment store ('' to skip)")
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("report", help="Markdown + HTML report of runs in the store")
    s.add_argument("runs", nargs="*", help="LM run names (default: every finished run)")
    s.add_argument("--store", default="runs/fiblab.db")
    s.add_argument("--probes", nargs="*", default=None,
                   help="probe result JSONL files (default: the probe cells in the store)")
    s.add_argument("--dataset", default=None, help="held-out domain (default: the only one)")
    s.add_argument("--title", default="fiblab report")
    s.add_argument("--paper-db", default=None,
                   help="also rebuild the paper's tables from the authors' fib.db")
    s.add_argument("--out", required=True, help="report folder, e.g. reports/NAME")
    s.set_defaults(fn=cmd_report)

    s = sub.add_parser("selfcheck", help="build a model, forward/backward through every path")
    s.add_argument("--preset", default="paper-60m")
    s.add_argument("--seq-len", type=int, default=None, help="input length (default: preset's)")
    s.set_defaults(fn=cmd_selfcheck)

    def set_args(sp):
        sp.add_argument("--window", "-W", type=int, default=8)
        sp.add_argument("--seq-len", "-T", type=int, default=1024)
        sp.add_argument("--base", type=_base_arg, default="fib")
        sp.add_argument("--rungs", "-K", type=int, default=15)
        sp.add_argument("--rounding", choices=["round", "floor", "ceil"], default="round")

    s = sub.add_parser("offsets", help="the attended distances of one layer")
    s.add_argument("--alpha", type=float, default=1.0)
    s.add_argument("--reach", type=int, default=None, help="freeze rungs at this length")
    s.add_argument("--interp", action="store_true", help="show interpolated columns instead")
    set_args(s)
    s.set_defaults(fn=cmd_offsets)

    s = sub.add_parser("schedule", help="per-layer alpha and attended sets of a schedule")
    s.add_argument("schedule", type=_schedule_arg, help="fixed|stagger|coprime|a,comma,list")
    s.add_argument("--layers", "-L", type=int, default=16)
    s.add_argument("--stride", type=int, default=None, help="coprime stride S")
    s.add_argument("--sets", action="store_true", help="print each layer's rungs")
    set_args(s)
    s.set_defaults(fn=cmd_schedule)

    s = sub.add_parser("coverage", help="distinct-distance and band coverage of a schedule")
    s.add_argument("--schedule", default="stagger", help="fixed|stagger|coprime")
    s.add_argument("--alphas", type=_schedule_arg, default=None, help="custom a,b,c per layer")
    s.add_argument("--layers", "-L", type=int, default=16)
    s.add_argument("--stride", type=int, default=None, help="coprime stride S")
    s.add_argument("--band", type=int, default=None, help="soft band half-width (default W)")
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.add_argument("--full", action="store_true", help="with --json: include per-distance data")
    set_args(s)
    s.set_defaults(fn=cmd_coverage)

    s = sub.add_parser("receptive-field", help="reachable distances through the stack")
    s.add_argument("--schedule", default="stagger",
                   help="fixed|stagger|coprime|pow2|pow2-stagger|dense")
    s.add_argument("--schemes", nargs="+", default=None, help="compare several schemes")
    s.add_argument("--alphas", type=_schedule_arg, default=None, help="custom a,b,c per layer")
    s.add_argument("--layers", "-L", type=int, default=16)
    s.add_argument("--residual", type=float, default=0.0, help="weight kept on staying put")
    s.add_argument("--json", action="store_true")
    set_args(s)
    s.set_defaults(fn=cmd_receptive_field)

    s = sub.add_parser("probe", help="retrieval probes (the paper's Table 2 grid)")
    s.add_argument("task", choices=["marked", "shift", "kv"])
    s.add_argument("--distances", type=int, nargs="+", default=None,
                   help="shift: trained distances (one cell each)")
    s.add_argument("--mechanisms", nargs="+", default=["blur"],
                   help="dense fib-fixed pow2 fib-stagger learned blur")
    s.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8])
    s.add_argument("--init", nargs="+", default=["uniform", "staggered"])
    s.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    s.add_argument("--scale", choices=["paper", "quick", "demo", "tiny"], default="paper")
    s.add_argument("--steps", type=int, default=None)
    s.add_argument("--batch", type=int, default=None)
    s.add_argument("--lr", type=float, default=None)
    s.add_argument("--precision", choices=["fp32", "bf16"], default=None,
                   help="bf16: forward under bfloat16 autocast, as the paper's GPU probes "
                        "(default fp32)")
    s.add_argument("--jobs", type=int, default=1,
                   help="cells run at once, in worker processes of cores/jobs threads each")
    s.add_argument("--out", default=None, help="results JSONL (resumable); default runs/probes/")
    s.add_argument("--json", action="store_true", help="one JSON record per cell on stdout")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--store", default="runs/fiblab.db",
                   help="experiment store to log the records into ('' to skip)")
    s.set_defaults(fn=cmd_probe)

    s = sub.add_parser("train", help="train a language model (paper recipe or a CPU preset)")
    s.add_argument("--preset", required=True, help="e.g. fib-stagger-w12, dense, cpu-stagger")
    s.add_argument("--data", default=None, help="bible (default), a file/folder/.jsonl/.parquet/"
                   ".bin, or a mixture name=source@weight,...")
    s.add_argument("--steps", type=int, default=None)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--name", default=None, help="run name (default: the preset)")
    s.add_argument("--override", nargs="*", metavar="KEY=VALUE",
                   help="any TrainConfig field, or model.<ModelConfig field>")
    s.add_argument("--resume", action="store_true", help="continue from the last good checkpoint")
    s.add_argument("--store", default="runs/fiblab.db", help="experiment store ('' to skip)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(fn=cmd_train)

    for module in ("lab.evaluate", "lab.efficiency"):        # subcommands defined beside their code
        import importlib
        importlib.import_module(module).add_cli(sub)

    s = sub.add_parser("params", help="parameter count of a preset")
    s.add_argument("--preset", default="paper-60m")
    s.add_argument("--schedule", default=None)
    s.set_defaults(fn=cmd_params)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except ValueError as e:
        print(f"fiblab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
