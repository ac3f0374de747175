"""The scale study (issue 40; claims.toml ``[scale]``): the stagger's gain against depth, context
and coverage, and the claims only depth decides — registered before its runs, trained stage by
stage, each finished run a committed row.

    python -m analysis.experiments.study.scale --register        # freeze [scale] (once)
    python -m analysis.experiments.study.scale --plan            # time a step per cell, print the plan
    python -m analysis.experiments.study.scale --stage L8-T128    # train what that stage lacks
    python -m analysis.experiments.study.scale --landscape       # α grid on the confirmation's runs
    python -m analysis.experiments.study.scale --recall          # the battery on them (both:
                                                                 # `scale_probes`)
    python -m analysis.experiments.study.scale --landscape --restore   # where runs/confirm is
                             # missing: retrain those runs first, each checked against its row
    python -m analysis.experiments.study.scale --decide          # every verdict of the study
    python -m analysis.experiments.study.scale --register-amendment w8   # a registered
                             # amendment (`scale_protocol`); then --stage L8-T128-W8 trains it

A stage is one cell's runs (`stages`): ``L8-T128`` (stagger and fixed 1–10 at L = 8, T = 128),
``L8-T128-depth`` (coprime, pow2-fixed, pow2-stagger 1–5 there), ``L4-T512``, ``L8-T512``;
the (4, 128) point is the confirmation's runs (`analysis.experiments.study.confirm`).  Each
run is the study's recipe (`runner.study_config`) with the cell's depth and length, fp32,
evaluated at 1×/2×/4×; its row (the ledger's `LMRun` and its setup) is appended to
``benchmarks/results/scale/runs.jsonl`` as it finishes, so a stage cut short, or continued on
another machine, trains only the rows it lacks.  Training refuses unless the registration's
hash is today's ``[scale]`` protocol (the rule R7 of claims.toml, as for the confirmation).
This module trains; what is registered is `scale_protocol`, what decides `scale_verdicts`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from analysis.experiments.study import confirm
from analysis.experiments.study import registration as REG
from analysis.experiments.study import scale_probes as SPR
from analysis.experiments.study import scale_protocol as proto
from analysis.experiments.study import scale_verdicts as SV
from lab.util import jsonio

__all__ = ["step_seconds", "plan_lines", "stage_estimate", "run_stage", "main"]


# ------------------------------------------------------------------------------------- plan
def step_seconds(cell, scheme: str, reps: int = 3, settings=None, window=None) -> float:
    """The fastest of ``reps`` training steps (forward, backward, AdamW over the step's 4096
    tokens) of a scheme's model at a cell, after one warm-up, on random ids: what a run's step
    costs, without its data or store.  ``settings`` / ``window``: as `run_stage` trains."""
    import torch

    from analysis.experiments.study.runner import study_config
    from lab.lm.model import FibLM

    cfg = study_config(
        proto.cell_settings(cell, settings, window), "plan", scheme, 0, 1, "/nonexistent", "fp32"
    )
    torch.manual_seed(0)
    model = FibLM(cfg.model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    B, T, V = cfg.micro_batch, cfg.model.seq_len, cfg.model.vocab_size
    micro = max(1, cfg.tokens_per_step // (B * T))
    g = torch.Generator().manual_seed(0)
    best = float("inf")
    for i in range(reps + 1):
        ids = [torch.randint(0, V, (B, T + 1), generator=g) for _ in range(micro)]
        t0 = time.perf_counter()
        for x in ids:
            _, loss = model(x[:, :-1], x[:, 1:])
            (loss / micro).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:  # the first is the warm-up
            best = min(best, time.perf_counter() - t0)
    return best


def plan_lines(times: dict, scale: dict | None = None, eval_s: float = 15.0) -> list[str]:
    """The plan as printed: each stage's runs, the measured step time of its schemes and the
    stage's estimate (steps × step + one evaluation a run), against the 2.5 h a stage should
    fit.  ``times``: {(cell, scheme): seconds a step}."""
    sc = scale or proto.load_scale()
    have = {(r["stage"], r["scheme"], r["seed"]) for r in proto.read_rows()}
    for name in proto.load_amendments():  # an amendment's rows are in its own folder
        rows = proto.amendment_rows(proto.amendment_folder(name, proto.RESULTS_DIR))
        have |= {(r["stage"], r["scheme"], r["seed"]) for r in rows}
    out = []
    for st in proto.stages(sc) + proto.amendment_stages():
        todo = [(s, k) for s, k in st.runs if (st.name, s, k) not in have]
        secs = sum(times[(st.cell, s)] * sc["steps"] + eval_s for s, _ in todo)
        schemes = sorted({s for s, _ in st.runs})
        steps = ", ".join(f"{s} {times[(st.cell, s)]:.2f} s" for s in schemes)
        fits = "fits" if secs <= 2.5 * 3600 else "does NOT fit"
        out.append(
            f"{st.name:<14} {len(todo):>2} of {len(st.runs)} runs to train · step: {steps} · "
            f"≈ {secs / 3600:.1f} h ({fits} 2.5 h)"
        )
    return out


def stage_estimate(todo, secs: dict, steps: int, eval_s: float = 15.0) -> str:
    """The line `run_stage` prints before it trains: the runs' time at the step times measured
    now (``secs``: scheme → seconds a step) plus one evaluation a run, against the 2.5 h a
    session's stage should fit, and how to split it when it does not."""
    total = sum(secs[k] * steps + eval_s for k, _ in todo)
    each = total / len(todo)
    line = (f"≈ {total / 3600:.1f} h for {len(todo)} runs (a step now: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in secs.items()) + ")")  # fmt: skip
    if total > 2.5 * 3600:
        line += (f"; more than a 2.5 h session: --limit {int(2.5 * 3600 // each)} trains what "
                 "fits, and the stage resumes where its rows end")  # fmt: skip
    return line


# -------------------------------------------------------------------------------------- train
def run_stage(
    name: str, limit: int | None = None, runs_dir: str = "runs/scale",
    out_dir: str = proto.RESULTS_DIR, log=print, scale: dict | None = None, settings=None,
) -> list[dict]:  # fmt: skip
    """Train the stage's runs the rows lack (at most ``limit``), appending each row as it
    finishes; refuses unless the registration holds (an amendment's stage: its own too, its
    rows in its own folder).  Returns the stage's rows.  ``scale`` and ``settings`` (a
    `StudyScale` the cells change) let the suite run a smoke-sized stage; the registration is
    still checked against claims.toml's."""
    from analysis.experiments.study.runner import Runner

    reg = proto.check_registered(out_dir)
    sc = scale or proto.load_scale()
    ams = proto.load_amendments()
    by_name = {s.name: s for s in proto.stages(sc) + proto.amendment_stages(ams)}
    if name not in by_name:
        raise ValueError(f"stage {name!r} is unknown: use one of {list(by_name)}")
    st = by_name[name]
    window = None
    if st.amendment:  # its own protocol: window, steps, precision, prefix, folder
        proto.check_amendment(st.amendment, out_dir, reg["protocol_sha256"])
        am = ams[st.amendment]
        sc, window = {**sc, **{k: am[k] for k in ("steps", "precision", "prefix")}}, am["window"]
        out_dir = proto.amendment_folder(st.amendment, out_dir)
    rows = proto.read_rows(out_dir)
    have = {(r["scheme"], r["seed"]) for r in rows if r["stage"] == name}
    todo = [r for r in st.runs if r not in have][: limit if limit is not None else None]
    log(f"{name}: {len(have)} of {len(st.runs)} runs committed; training {len(todo)} "
        f"({sc['steps']} steps, L={st.cell[0]}, T={st.cell[1]}, {sc['precision']})")  # fmt: skip
    if todo:  # the plan before anything trains: a step timed now, per scheme
        secs = {
            k: step_seconds(st.cell, k, 2, settings, window) for k in sorted({k for k, _ in todo})
        }
        log(stage_estimate(todo, secs, sc["steps"]))
    os.makedirs(runs_dir, exist_ok=True)
    store_path = os.path.join(runs_dir, "fiblab.db")
    r = Runner(
        proto.cell_settings(st.cell, settings, window), proto.run_prefix(sc, st.cell), runs_dir,
        store_path, True, log, sc["precision"],
    )  # fmt: skip
    path = os.path.join(out_dir, proto.ROWS)
    os.makedirs(out_dir, exist_ok=True)
    for scheme, seed in todo:
        res = r.run(scheme, seed, sc["steps"])
        run, scale_name, setup = confirm._lmrun(store_path, res["name"], res.get("block_change"))
        row = {"stage": name, "cell": list(st.cell)}
        row.update(confirm._row(run, scale_name, setup, scheme, seed))
        jsonio.append_row(path, row)  # one line a run: a cut leaves whole rows
        rows.append(row)
    return [x for x in rows if x["stage"] == name]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--register", action="store_true", help="freeze the [scale] protocol (once)")
    ap.add_argument(
        "--register-amendment", metavar="NAME", default=None,
        help="freeze claims.toml's [amendment.NAME] (once, before its runs)",
    )  # fmt: skip
    ap.add_argument("--plan", action="store_true", help="time a step per cell; print the plan")
    ap.add_argument("--stage", default=None, help="train that stage's missing runs")
    ap.add_argument("--limit", type=int, default=None, help="train at most this many runs")
    ap.add_argument(
        "--landscape",
        action="store_true",
        help="evaluate the confirmation's runs over the α grid (needs their checkpoints)",
    )
    ap.add_argument(
        "--recall",
        action="store_true",
        help="score the battery on the confirmation's runs (needs their checkpoints)",
    )
    ap.add_argument(
        "--restore",
        action="store_true",
        help="with --landscape / --recall: first retrain the confirmation runs whose "
        "checkpoints are missing here (each must reproduce its committed row)",
    )
    ap.add_argument("--decide", action="store_true", help="decide from the committed rows")
    ap.add_argument("--runs", default="runs/scale", help="runs folder (checkpoints)")
    args = ap.parse_args(argv)
    try:
        REG.check_limit(args.limit)
        if args.register:
            doc = proto.register(proto.RESULTS_DIR)
            print(f"registered {doc['protocol_sha256'][:12]}… at {doc['registered_at']}")
        elif args.register_amendment:
            reg = proto.check_registered(proto.RESULTS_DIR)
            doc = proto.register_amendment(
                args.register_amendment, proto.RESULTS_DIR, reg["protocol_sha256"]
            )
            print(f"registered {args.register_amendment}: {doc['protocol_sha256'][:12]}… at "
                  f"{doc['registered_at']} (stage {doc['stage']['name']})")  # fmt: skip
        elif args.plan:
            from lab.machine.contention import watch

            sc = proto.load_scale()
            with watch() as w:
                times = {
                    (st.cell, s): step_seconds(st.cell, s)
                    for st in proto.stages(sc) + proto.amendment_stages()
                    for s in sorted({s for s, _ in st.runs})
                }
            print("\n".join(plan_lines(times, sc)))
            print(f"step times measured {w.result.line()}")
        elif args.stage:
            run_stage(args.stage, args.limit, args.runs, out_dir=proto.RESULTS_DIR)
        elif args.landscape or args.recall:
            proto.check_registered(proto.RESULTS_DIR)
            side = "landscape" if args.landscape else "recall"
            todo = SPR.missing(proto.RESULTS_DIR, side)[: args.limit]
            print(f"{side}: {len(todo)} confirmation runs without a committed row")
            # one run at a time: restored, scored, its row appended — a cut loses one run at most
            for name in todo:
                if args.restore:
                    confirm.restore(names={name})
                if args.landscape:
                    SPR.run_landscape(
                        proto.load_scale()["landscape"], proto.RESULTS_DIR, names={name}
                    )
                else:
                    SPR.run_recall(proto.RESULTS_DIR, names={name})
        elif args.decide:
            out = SV.decide(proto.RESULTS_DIR)
            print(json.dumps(out.get("trend"), indent=1))
        else:
            ap.print_help()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
