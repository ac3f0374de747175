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
                             # amendment (`scale_amend`); then --stage L8-T128-W8 trains it

A stage is one cell's runs (`stages`): ``L8-T128`` (stagger and fixed 1–10 at L = 8, T = 128),
``L8-T128-depth`` (coprime, pow2-fixed, pow2-stagger 1–5 there), ``L4-T512``, ``L8-T512``;
the (4, 128) point is the confirmation's runs (`analysis.experiments.study.confirm`).  Each
run is the study's recipe (`runner.study_config`) with the cell's depth and length, fp32,
evaluated at 1×/2×/4×; its row (the ledger's `LMRun` and its setup) is appended to
``benchmarks/results/scale/runs.jsonl`` as it finishes, so a stage cut short, or continued on
another machine, trains only the rows it lacks.  Training refuses unless the registration's
hash is today's ``[scale]`` protocol (the rule R7 of claims.toml, as for the confirmation).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
import time

from analysis.experiments.study import confirm
from analysis.experiments.study import scale_amend as SA
from analysis.experiments.study import scale_probes as SPR
from lab.util import jsonio
from lab.util.files import atomic_write

__all__ = [
    "RESULTS_DIR",
    "Stage",
    "load_scale",
    "stages",
    "cell_settings",
    "protocol_hash",
    "register",
    "check_registered",
    "read_rows",
    "step_seconds",
    "plan_lines",
    "run_stage",
    "trend_runs",
    "missing",
    "decide",
]

RESULTS_DIR = os.path.join(confirm.ROOT, "benchmarks", "results", "scale")
ROWS = "runs.jsonl"
REGISTRATION = "registration.json"


@dataclasses.dataclass(frozen=True)
class Stage:
    """One resumable stage: a cell (L, T) and the (scheme, seed) runs it trains; ``amendment``
    names the registered amendment (`scale_amend`) it belongs to, whose window it trains at."""

    name: str
    cell: tuple[int, int]
    runs: tuple[tuple[str, int], ...]
    amendment: str | None = None


def load_scale(path: str | None = None) -> dict:
    """claims.toml's ``[scale]`` table."""
    import tomllib

    from analysis.ledger.ledger import CLAIMS_PATH

    with open(path or CLAIMS_PATH, "rb") as f:
        return dict(tomllib.load(f)["scale"])


def _seeds(spec: dict) -> list[tuple[str, int]]:
    """Seed by seed, each scheme in turn: a stage cut short leaves balanced sides."""
    seeds = {k: list(range(v[0], v[1] + 1)) for k, v in spec.items()}
    out, i = [], 0
    while any(i < len(s) for s in seeds.values()):
        out += [(k, s[i]) for k, s in seeds.items() if i < len(s)]
        i += 1
    return out


def stages(scale: dict | None = None) -> list[Stage]:
    """The registered stages, in ``[scale] order``."""
    sc = scale or load_scale()
    by_name = {}
    for L, T in sc["cells"]:
        if [L, T] != list(sc["from_confirmation"]):
            by_name[f"L{L}-T{T}"] = Stage(f"L{L}-T{T}", (L, T), tuple(_seeds(sc["schemes"])))
    L, T = sc["depth"]["cell"]
    by_name[f"L{L}-T{T}-depth"] = Stage(
        f"L{L}-T{T}-depth", (L, T), tuple(_seeds(sc["depth"]["schemes"]))
    )
    return [by_name[n] for n in sc["order"]]


def amendment_stages(amendments: dict | None = None) -> list[Stage]:
    """Each registered amendment's stage (claims.toml ``[amendment.*]``)."""
    ams = SA.load_amendments() if amendments is None else amendments
    return [
        Stage(SA.stage_name(am), tuple(am["cell"]), SA.stage_runs(am), name)
        for name, am in ams.items()
    ]


def cell_settings(cell: tuple[int, int], base=None, window: int | None = None):
    """The study's `StudyScale` (or ``base``) at a cell: its length, and its depth as a model
    override; ``window``: an amendment's W (else the study's)."""
    from analysis.experiments.study import plan as SP

    L, T = cell
    base = base or SP.STUDY_SCALES["study"]
    if window is not None:
        base = dataclasses.replace(base, window=window)
    return dataclasses.replace(base, seq_len=T, overrides={**base.overrides, "model.n_layers": L})


def _prefix(scale: dict, cell) -> str:
    return f"{scale['prefix']}-L{cell[0]}"  # run_name adds the scheme, seed, T and steps


# ------------------------------------------------------------------------------- registration
def protocol_hash(scale: dict | None = None) -> str:
    """The SHA-256 of the scale protocol: the ``[scale]`` table, the tests of the claims it
    registered (``registration = "scale"``) and of the depth claims it decides."""
    from analysis.ledger import ledger

    sc = scale or load_scale()
    paper, lab = ledger.load_claims()
    mine = [
        c
        for c in paper + lab
        if c.get("registration") == "scale" or c["id"] in sc["depth"]["claims"]
    ]
    proto = ledger.protocol(mine, ledger.load_rules())
    proto["scale"] = sc
    return ledger.protocol_sha256(proto)


def register(out_dir: str = RESULTS_DIR) -> dict:
    """Freeze the scale protocol before any of its runs: hash, date, commit, stages."""
    if read_rows(out_dir) or os.path.exists(os.path.join(out_dir, REGISTRATION)):
        raise ValueError(
            f"{out_dir} holds a scale registration or rows already: the protocol is frozen "
            f"once, before its runs (a changed study is a new registration in a new folder)"
        )
    doc = {
        "protocol_sha256": protocol_hash(),
        "registered_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit_before": confirm._commit(),
        "stages": [dataclasses.asdict(s) for s in stages()],
        "scale": load_scale(),
        "note": "frozen before any scale run was trained; decided by this protocol alone "
        "(claims.toml, the scale study's section)",
    }
    os.makedirs(out_dir, exist_ok=True)
    atomic_write(os.path.join(out_dir, REGISTRATION), jsonio.dumps(doc, indent=1))
    return doc


def check_registered(out_dir: str = RESULTS_DIR) -> dict:
    """The registration, when today's ``[scale]`` protocol is the one it froze; else ValueError
    naming the fix (`confirm.frozen`, the confirmation's same check)."""
    return confirm.frozen(
        os.path.join(out_dir, REGISTRATION),
        protocol_hash(),
        "python -m analysis.experiments.study.scale --register",
        "restore claims.toml's [scale] section and its claims",
    )


def read_rows(out_dir: str = RESULTS_DIR) -> list[dict]:
    """The committed rows, one a finished scale run."""
    return jsonio.read_rows(os.path.join(out_dir, ROWS))


# ------------------------------------------------------------------------------------- plan
def step_seconds(cell, scheme: str, reps: int = 3) -> float:
    """The fastest of ``reps`` training steps (forward, backward, AdamW over the step's 4096
    tokens) of a scheme's model at a cell, after one warm-up, on random ids: what a run's step
    costs, without its data or store."""
    import torch

    from analysis.experiments.study.runner import study_config
    from lab.lm.model import FibLM

    cfg = study_config(cell_settings(cell), "plan", scheme, 0, 1, "/nonexistent", "fp32")
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
    sc = scale or load_scale()
    have = {(r["stage"], r["scheme"], r["seed"]) for r in read_rows()}
    out = []
    for st in stages(sc):
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


# -------------------------------------------------------------------------------------- train
def run_stage(
    name: str, limit: int | None = None, runs_dir: str = "runs/scale", out_dir: str = RESULTS_DIR,
    log=print, scale: dict | None = None, settings=None,
) -> list[dict]:  # fmt: skip
    """Train the stage's runs the rows lack (at most ``limit``), appending each row as it
    finishes; refuses unless the registration holds (an amendment's stage: its own too, its
    rows in its own folder).  Returns the stage's rows.  ``scale`` and ``settings`` (a
    `StudyScale` the cells change) let the suite run a smoke-sized stage; the registration is
    still checked against claims.toml's."""
    from analysis.experiments.study.runner import Runner

    reg = check_registered(out_dir)
    sc = scale or load_scale()
    ams = SA.load_amendments()
    by_name = {s.name: s for s in stages(sc) + amendment_stages(ams)}
    if name not in by_name:
        raise ValueError(f"stage {name!r} is unknown: use one of {list(by_name)}")
    st = by_name[name]
    window = None
    if st.amendment:  # its own protocol: window, steps, precision, prefix, folder
        SA.check_registered(st.amendment, out_dir, reg["protocol_sha256"])
        am = ams[st.amendment]
        sc, window = {**sc, **{k: am[k] for k in ("steps", "precision", "prefix")}}, am["window"]
        out_dir = SA.folder(st.amendment, out_dir)
    rows = read_rows(out_dir)
    have = {(r["scheme"], r["seed"]) for r in rows if r["stage"] == name}
    todo = [r for r in st.runs if r not in have][: limit if limit is not None else None]
    log(f"{name}: {len(have)} of {len(st.runs)} runs committed; training {len(todo)} "
        f"({sc['steps']} steps, L={st.cell[0]}, T={st.cell[1]}, {sc['precision']})")  # fmt: skip
    os.makedirs(runs_dir, exist_ok=True)
    store_path = os.path.join(runs_dir, "fiblab.db")
    r = Runner(
        cell_settings(st.cell, settings, window), _prefix(sc, st.cell), runs_dir, store_path, True,
        log,
        sc["precision"],
    )  # fmt: skip
    path = os.path.join(out_dir, ROWS)
    os.makedirs(out_dir, exist_ok=True)
    for scheme, seed in todo:
        res = r.run(scheme, seed, sc["steps"])
        run, scale_name, setup = confirm._lmrun(store_path, res["name"], res.get("block_change"))
        row = {"stage": name, "cell": list(st.cell)}
        row.update(confirm._row(run, scale_name, setup, scheme, seed))
        jsonio.append_row(path, row)  # one line a run: a cut leaves whole rows
        rows.append(row)
    return [x for x in rows if x["stage"] == name]


# ------------------------------------------------------------------------------------- decide
def trend_runs(rows: list[dict], confirm_rows: list[dict], scale: dict | None = None) -> list:
    """(cell, Δcov, scheme, perplexity) of every stagger and fixed run at a registered cell: the
    scale rows, and the confirmation's at its (4, 128) point."""
    sc = scale or load_scale()
    dcov = {tuple(c): d for c, d in zip(sc["cells"], sc["coverage_difference"])}
    out = [
        (tuple(r["cell"]), dcov[tuple(r["cell"])], r["scheme"], r["run"]["ppl"])
        for r in rows
        if r["scheme"] in ("stagger", "fixed") and tuple(r["cell"]) in dcov
    ]
    home = tuple(sc["from_confirmation"])
    out += [
        (home, dcov[home], r["scheme"], r["run"]["ppl"])
        for r in confirm_rows
        if r["scheme"] in ("stagger", "fixed")
    ]
    return [(c, d, s, float("nan") if p is None else p) for c, d, s, p in out]


def missing(rows: list[dict], scale: dict | None = None) -> dict[str, int]:
    """Per registered stage, its planned runs without a committed row."""
    have = {(r["stage"], r["scheme"], r["seed"]) for r in rows}
    return {
        st.name: sum((st.name, k, seed) not in have for k, seed in st.runs)
        for st in stages(scale or load_scale())
    }


def _pending(what: str, gaps: dict[str, int], planned: dict[str, int]) -> dict | None:
    """None when nothing is missing, else the "pending" entry that says what is."""
    gaps = {k: v for k, v in gaps.items() if v}
    if not gaps:
        return None
    left = ", ".join(f"{k} {planned[k] - v} of {planned[k]}" for k, v in gaps.items())
    return {
        "verdict": "pending",
        "why": f"{what} runs once every planned run is committed ({left} so far); "
        f"no test is computed on part of a plan",
    }


def decide(out_dir: str = RESULTS_DIR) -> dict:
    """The scale study's verdicts from the committed rows, written as ``claims.json`` beside
    them: the trend test (`analysis.statistics.trend`), each cell's gap, and the depth claims
    decided by the ledger on the depth cell's runs alone.  Each part is decided only once all of
    its planned runs are committed; before that it is "pending" with no statistic computed (a
    test on part of a plan, looked at as the rows arrive, would be an unregistered interim
    look)."""
    from analysis.ledger import ledger

    sc = load_scale()
    doc = check_registered(out_dir)
    rows = read_rows(out_dir)
    plan = {st.name: len(st.runs) for st in stages(sc)}
    gaps = missing(rows, sc)
    depth_stage = next(st.name for st in stages(sc) if st.name.endswith("-depth"))
    out = {
        "registration": {k: doc[k] for k in ("protocol_sha256", "registered_at", "commit_before")},
        "runs": len(rows),
        "planned": sum(plan.values()),
    }
    trend_gaps = {k: v for k, v in gaps.items() if k != depth_stage}
    out["trend"] = _pending("the trend test", trend_gaps, plan) or _trend(rows, sc, doc, out_dir)
    depth_cell = f"L{sc['depth']['cell'][0]}-T{sc['depth']['cell'][1]}"
    depth_gaps = {k: gaps[k] for k in (depth_cell, depth_stage) if k in gaps}
    pend = _pending("the depth claims", depth_gaps, plan)
    if pend:
        out["depth"] = {c: pend for c in sc["depth"]["claims"]}
    else:
        depth = [r for r in rows if tuple(r["cell"]) == tuple(sc["depth"]["cell"])]
        led = ledger.build(confirm.evidence_from_rows(depth, "scale study, depth cell"))
        out["depth"] = {
            e.id: {"verdict": e.verdict, "label": e.label, "here": e.here, "why": e.why}
            for e in led.entries
            if e.id in sc["depth"]["claims"]
        }
    out["amendments"] = {
        st.amendment: _amendment(st, rows, sc, out_dir, doc) for st in amendment_stages()
    }
    conf = confirm.read_rows()
    land, rec = SPR.landscape_rows(out_dir), SPR.recall_rows(out_dir)
    want = {r["run"]["name"] for r in conf if r["scheme"] in ("fixed", "learned")}
    left = len(want - {r["name"] for r in land})
    out["landscape"] = _pending(
        "the α landscape", {"landscape": left}, {"landscape": len(want)}
    ) or SPR.landscape_verdict(land, conf)
    left = len({r["run"]["name"] for r in conf} - {r["name"] for r in rec})
    pend = _pending("the battery", {"recall": left}, {"recall": len(conf)})
    if pend:  # the same claims a decided battery lists (the ledger's bat-* entries)
        bat = [c["id"] for c in ledger.load_claims()[0] if c["id"].startswith("bat-")]
        out["battery"] = {c: pend for c in bat}
    else:
        out["battery"] = SPR.recall_verdicts(rec, conf)
    atomic_write(os.path.join(out_dir, "claims.json"), jsonio.dumps(out, indent=1))
    return out


def _amendment(st: Stage, rows: list[dict], sc: dict, out_dir: str, doc: dict) -> dict:
    """An amendment's claims: "pending" until its planned runs and the depth cell's are all
    committed (or while it is unregistered), then the ledger over the depth cell's runs and its
    own, only the claims it names read off (the other claims' inputs change: not looked at)."""
    from analysis.ledger import ledger

    am = SA.load_amendments()[st.amendment]
    try:
        SA.check_registered(st.amendment, out_dir, doc["protocol_sha256"])
    except ValueError as e:
        return {c: {"verdict": "pending", "why": str(e)} for c in am["claims"]}
    own = SA.read_rows(SA.folder(st.amendment, out_dir))
    have = {(r["scheme"], r["seed"]) for r in own}
    depth = [r for r in rows if tuple(r["cell"]) == tuple(sc["depth"]["cell"])]
    depth_stages = [x for x in stages(sc) if x.cell == tuple(sc["depth"]["cell"])]
    gaps = {st.name: sum(r not in have for r in st.runs)} | {
        k: v for k, v in missing(rows, sc).items() if k in {x.name for x in depth_stages}
    }
    plan = {st.name: len(st.runs)} | {x.name: len(x.runs) for x in depth_stages}
    pend = _pending(f"amendment {st.amendment}", gaps, plan)
    if pend:
        return {c: pend for c in am["claims"]}
    led = ledger.build(confirm.evidence_from_rows(depth + own, "scale study, depth cell + W"))
    return {
        e.id: {"verdict": e.verdict, "label": e.label, "here": e.here, "why": e.why}
        for e in led.entries
        if e.id in am["claims"]
    }


def _trend(rows: list[dict], sc: dict, doc: dict, out_dir: str) -> dict:
    """The registered trend test on every planned stagger and fixed run, and its figure."""
    from analysis.statistics.trend import trend_test

    try:
        t = trend_test(trend_runs(rows, confirm.read_rows(), sc))
    except ValueError as e:
        return {"verdict": "not tested here", "why": str(e)}
    alpha = 0.05
    verdict = "held" if t.p < alpha else "did not hold" if t.p_against < alpha else "not shown"
    out = {"verdict": verdict, "power": sc["trend"]["power"]}
    out.update(jsonio.clean(dataclasses.asdict(t)))
    from analysis.figures.plots import scale_trend

    caption = (
        f"Registered test (claims.toml lab-scale-trend, frozen {doc['registered_at'][:10]}): "
        f"OLS of ln ppl on cell effects + stagger + stagger × Δcov/100, HC3, one-sided; "
        f"slope {t.slope:+.4f} nats per 100 distances (95 % CI [{t.ci[0]:+.4f}, "
        f"{t.ci[1]:+.4f}]), p {t.p:.3g}: {verdict}; power {sc['trend']['power']} for the "
        f"hypothesised {sc['trend']['slope_hypothesis']}. {t.n_runs} runs, fp32."
    )
    scale_trend(t, sc["paper_point"], os.path.join(out_dir, "trend.png"), caption)
    return out


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
        if args.register:
            doc = register(RESULTS_DIR)
            print(f"registered {doc['protocol_sha256'][:12]}… at {doc['registered_at']}")
        elif args.register_amendment:
            reg = check_registered(RESULTS_DIR)
            doc = SA.register(args.register_amendment, RESULTS_DIR, reg["protocol_sha256"])
            print(f"registered {args.register_amendment}: {doc['protocol_sha256'][:12]}… at "
                  f"{doc['registered_at']} (stage {doc['stage']['name']})")  # fmt: skip
        elif args.plan:
            from lab.machine.contention import watch

            sc = load_scale()
            with watch() as w:
                times = {
                    (st.cell, s): step_seconds(st.cell, s)
                    for st in stages(sc)
                    for s in sorted({s for s, _ in st.runs})
                }
            print("\n".join(plan_lines(times, sc)))
            print(f"step times measured {w.result.line()}")
        elif args.stage:
            run_stage(args.stage, args.limit, args.runs, out_dir=RESULTS_DIR)
        elif args.landscape or args.recall:
            check_registered(RESULTS_DIR)
            if args.restore:
                confirm.restore(("fixed", "learned") if args.landscape else None)
            if args.landscape:
                SPR.run_landscape(load_scale()["landscape"], RESULTS_DIR)
            else:
                SPR.run_recall(RESULTS_DIR)
        elif args.decide:
            out = decide(RESULTS_DIR)
            print(json.dumps(out.get("trend"), indent=1))
        else:
            ap.print_help()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
