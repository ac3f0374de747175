"""`fiblab demo --scale study`: a CPU study that can decide the paper's two headline LM claims
(dense degrades at 4× the training length; stagger beats fixed by 2.5 %). Settings, the rung rule
and the seeds plan: `analysis.experiments.study.plan`; the report: `analysis.experiments.study.report`.

Every stage reuses finished work under the demo's rules (`analysis.experiments.demo.reuse`): a run trained to
its steps (intact checkpoint, store status done) is not trained again, its evaluations are reused
under the same key, and a calibration rung starts from the rung below's final checkpoint (exact:
no LR decay, batches a pure function of (seed, step)). A killed study resumes where it stopped.
Every study run's stored config carries ``"scale": "study"`` (`runner.StudyStore`), so evidence from
it can be told from the demo's short runs; its name starts with the scale (``study-…``).

One precision for the whole study (`analysis.experiments.study.precision`), kept when it is continued on a
machine whose ``auto`` answers otherwise; the report states it.

This module holds the four stages (calibration, the comparison, longer training, the lab's
arms), the ledger hand-off and the re-decision of a finished study (`report_again`); one run —
its name, config, training and evaluation — is `analysis.experiments.study.runner`'s.
"""

from __future__ import annotations

import json
import os
import time

from analysis.experiments.study import plan as SP
from analysis.experiments.study.precision import study_precision
from analysis.experiments.study.runner import Runner, run_name, study_config
from lab.ladder.schedules import coprime_is_stagger
from lab.store import Store
from lab.util import jsonio

__all__ = [
    "run_study",
    "report_again",
    "study_ledger",
    "lm_entries",
    "lab_lm_entries",
    "PLAN_FILE",
]

#: The stage-2 seed decision, kept beside the runs so a resumed study keeps its plan.
PLAN_FILE = "plan.json"


def _budget_line(log, what: str, cost_s: float, spent_s: float, budget_s: float) -> None:
    log(
        f"   budget: {what} ≈ {cost_s / 60:.1f} min; the study ≈ {(spent_s + cost_s) / 60:.1f} "
        f"of {budget_s / 60:.0f} min"
    )


def _fits(log, what: str, cost_s: float, spent_s: float, budget_s: float) -> bool:
    """An optional stage's gate: its budget line, and whether it fits (else it says so)."""
    _budget_line(log, what, cost_s, spent_s, budget_s)
    if spent_s + cost_s > budget_s:
        log(f"   not run: over the {budget_s / 60:.0f} min budget")
        return False
    return True


def _calibration(r: Runner, sc) -> tuple[dict, float]:
    lines = [(s, seed) for s, seeds in sc.calib_seeds.items() for seed in seeds]
    top = max(sc.ladder)
    cost = sum(r.times.run_s(s, top) + (len(sc.ladder) - 1) * r.times.eval_cost() for s, _ in lines)
    _budget_line(
        r.log, f"calibration ({len(lines)} lines × {len(sc.ladder)} rungs)", cost, 0, sc.budget_s
    )
    rows = []
    for s, seed in lines:
        below = None
        for steps in sc.ladder:
            rows.append(r.run(s, seed, steps, below))
            below = steps
    curve = {}
    for row in rows:
        if row["scheme"] == "dense":
            curve.setdefault(row["steps"], []).append(row["degradation"])
    steps, degrades = SP.chosen_rung(curve, sc.min_rise, sc.spread_k)
    spent = sum(
        r.times.run_s(s, top) + (len(sc.ladder) - 1) * r.times.eval_cost() for s, _ in lines
    )
    return {"rows": rows, "curve": curve, "chosen": steps, "degrades": degrades}, spent


def _saved_plan(path: str, key: dict) -> dict | None:
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) and saved.get("key") == key else None


def _family_alpha() -> float:
    """Holm's first threshold in the study's family: 0.05 over its number of comparisons
    (`study_report.PAPER`), the level the seeds are planned for."""
    from analysis.experiments.study.report import PAPER

    return 0.05 / len(PAPER)


def _same_as_stagger(r: Runner, sc, steps: int) -> dict[str, str]:
    """{scheme: why} of the other schemes whose α are the stagger's at the study's depth."""
    out = {}
    for s in sc.others:
        m = study_config(sc, r.prefix, s, 1, steps, r.runs_dir).model
        if coprime_is_stagger(m.schedule, m.n_layers, m.coprime_stride):
            out[s] = (
                f"at L={m.n_layers} the coprime schedule is the linear stagger (no stride in "
                f"2..L/2 is coprime with L): its runs would repeat the stagger's"
            )
    return out


def _comparison(r: Runner, sc, steps: int, spent: float, plan_path: str) -> dict:
    first = sc.first_seeds
    new = [  # the calibration's runs at this rung are counted (and reused) already
        s
        for s in ("stagger", "fixed")
        for seed in range(1, first + 1)
        if run_name(r.prefix, s, seed, steps, sc.seq_len) not in r.results
    ]
    cost = sum(r.times.run_s(s, steps) for s in new)
    _budget_line(
        r.log, f"first batch ({first} seeds each of stagger and fixed)", cost, spent, sc.budget_s
    )
    side = {
        s: [r.run(s, seed, steps) for seed in range(1, first + 1)] for s in ("stagger", "fixed")
    }
    spent += cost
    ppl = {s: [row["ppl"][1] for row in rows] for s, rows in side.items()}
    alpha = _family_alpha()
    pl = SP.seeds_plan(ppl["stagger"], ppl["fixed"], alpha=alpha, level=0.95)
    same = _same_as_stagger(r, sc, steps)
    others_s = sum(
        r.times.run_s(s, steps)
        for s in sc.others
        if s not in same
        for seed in range(1, sc.other_seeds + 1)
        if not r.done(s, seed, steps)
    )
    pair_s = r.times.run_s("stagger", steps) + r.times.run_s("fixed", steps)
    key = {"steps": steps, "first": [round(v, 6) for v in ppl["stagger"] + ppl["fixed"]]}
    saved = _saved_plan(plan_path, key)
    if saved is not None:
        extra = int(saved["extra"])
    else:
        left = sc.budget_s - spent - others_s
        extra = SP.extra_seeds(pl.needed, first, sc.max_seeds, pair_s, left) if pl else 0
        with open(plan_path, "w") as f:
            jsonio.dump({"key": key, "extra": extra}, f)
    r.log(
        f"   seed-to-seed σ ≤ {pl.sigma:.3f} (upper 95 % bound of the pooled σ, n={first} a "
        f"side): d ≥ {pl.d:.2f}, {pl.needed} seeds a side for 80 % power at α = {alpha:.4f} "
        f"(Holm's first threshold); running {first + extra}"
        if pl
        else "   σ is zero or undefined: no power plan; running the first batch only"
    )
    _budget_line(r.log, f"{extra} more seeds each", extra * pair_s, spent, sc.budget_s)
    for seed in range(first + 1, first + extra + 1):
        for s in ("stagger", "fixed"):
            side[s].append(r.run(s, seed, steps))
    spent += extra * pair_s
    _budget_line(
        r.log,
        f"others ({', '.join(sc.others)}, {sc.other_seeds} seeds)",
        others_s,
        spent,
        sc.budget_s,
    )
    others, skipped = {}, []
    for s in sc.others:
        if s in same:
            r.log(f"   {s}: not run — {same[s]}")
            continue
        todo = [seed for seed in range(1, sc.other_seeds + 1) if not r.done(s, seed, steps)]
        one = r.times.run_s(s, steps) * len(todo)
        done = not todo
        if spent + one > sc.budget_s and not done:  # runs already there cost nothing
            skipped.append(s)
            continue
        others[s] = [r.run(s, seed, steps) for seed in range(1, sc.other_seeds + 1)]
        spent += one
    n = min(len(side["stagger"]), len(side["fixed"]))
    xs, xf = ([row["ppl"][1] for row in side[s]] for s in ("stagger", "fixed"))
    final = SP.seeds_plan(xs, xf, n, alpha=alpha)
    bound = SP.seeds_plan(xs, xf, n, alpha=alpha, level=0.95)
    return {
        "runs": {**side, **others},
        "first_plan": pl.to_json() if pl else None,
        "plan": final.to_json() if final else None,
        "plan_sigma_upper": bound.to_json() if bound else None,
        "extra": extra,
        "skipped": skipped,
        "same": same,
        "estimated_s": spent,
    }


def study_ledger(store_path: str):
    """The claims ledger (`analysis.ledger.ledger`) on every finished run in the study's store, the
    lab's stored probe grids and attention timings: the study's runs rank above any demo runs
    there, so the paper's LM claims are decided by the study where it has evidence. The study
    writes its ``claims.json``; its report shows the LM entries (`lm_entries`)."""
    from analysis.ledger import evidence as le
    from analysis.ledger import ledger

    with Store(store_path) as st:
        return ledger.build(le.from_store(st, grids=le.stored_grids(), timings=le.stored_timings()))


def lm_entries(led) -> list:
    """The ledger's entries on the paper's language-model claims (and the battery's)."""
    return [e for e in led.paper() if e.kind.startswith("lm") or e.kind == "battery"]


def lab_lm_entries(led) -> list:
    """The ledger's entries on the lab's own language-model findings (never the paper's)."""
    return [e for e in led.lab() if e.kind.startswith("lm")]


def _ledger_verdicts(entries) -> dict | None:
    """{claim id: verdict as shown} of the ledger's entries, for the report's verdict column."""
    return None if entries is None else {e.id: e.shown for e in entries}


def _longer(r: Runner, sc, steps: int, spent: float) -> dict | None:
    """Stage 3, when the chosen rung is below the ladder's top and the budget has room: stagger
    and fixed on the first batch's seeds continued to the top rung (exact continuations of the
    chosen rung's runs; seed 1's are the calibration's), so the comparison is also made with
    longer-trained models. Within the study's worst-case estimate (stage 2 at the top rung)."""
    top = max(sc.ladder)
    if steps >= top:
        return None
    seeds = range(1, sc.first_seeds + 1)
    todo = [
        (s, seed)
        for s in ("stagger", "fixed")
        for seed in seeds
        if run_name(r.prefix, s, seed, top, sc.seq_len) not in r.results
        and not r.done(s, seed, top)
    ]
    cost = sum(r.times.run_s(s, top - steps) for s, _ in todo)
    what = f"stagger and fixed continued to {top} steps ({len(todo)} runs)"
    if not _fits(r.log, what, cost, spent, sc.budget_s):
        return {"steps": top, "runs": {}, "skipped": True, "estimated_s": spent}
    side = {s: [r.run(s, seed, top, below=steps) for seed in seeds] for s in ("stagger", "fixed")}
    return {"steps": top, "runs": side, "skipped": False, "estimated_s": spent + cost}


def _lab(r: Runner, sc, steps: int, spent: float) -> dict | None:
    """Stage 4, the lab's own arms (``sc.lab``: the schedule search's best, `SP.SEARCH_BEST`) at
    the chosen rung, ``sc.lab_seeds`` seeds each, beside the stagger's runs there — decided by the
    ledger as lab findings under the registered protocol; only where the budget has room."""
    if not sc.lab:
        return None
    seeds = range(1, sc.lab_seeds + 1)
    todo = [(s, seed) for s in sc.lab for seed in seeds if not r.done(s, seed, steps)]
    cost = sum(r.times.run_s(s, steps) for s, _ in todo)
    what = f"the lab's arms ({', '.join(sc.lab)}, {sc.lab_seeds} seeds)"
    if not _fits(r.log, what, cost, spent, sc.budget_s):
        return {"steps": steps, "runs": {}, "skipped": True, "estimated_s": spent}
    runs = {s: [r.run(s, seed, steps) for seed in seeds] for s in sc.lab}
    alphas = {
        s: list(study_config(sc, r.prefix, s, 1, steps, r.runs_dir).model.schedule) for s in sc.lab
    }
    return {
        "steps": steps,
        "runs": runs,
        "alphas": alphas,
        "skipped": False,
        "estimated_s": spent + cost,
    }


def _noise(cmp_: dict, runs_dir: str) -> dict:
    """The paired window bootstrap of each perplexity comparison (`analysis.experiments.study.windows`)."""
    from analysis.experiments.study.report import PAPER
    from analysis.experiments.study.windows import comparison_noise

    pairs = [(claim, a, b) for claim, a, b, measure, *_ in PAPER if measure == "ppl"]
    return comparison_noise(cmp_["runs"], pairs, runs_dir)


def run_study(
    scale: str = "study",
    out_dir: str = "reports/study",
    runs_dir: str = "runs",
    store_path: str | None = "runs/fiblab.db",
    quiet: bool = False,
    log=print,
    settings: SP.StudyScale | None = None,
) -> dict:
    """Both stages and the report; returns the results (also ``out_dir/study.json``), with the
    runs trained, reused and evaluated in this invocation."""
    from analysis.experiments.study.report import study_report, verdicts

    if scale not in SP.STUDY_SCALES:
        raise ValueError(
            f"scale {scale!r} is not a study scale: use one of {sorted(SP.STUDY_SCALES)}"
        )
    sc = settings or SP.STUDY_SCALES[scale]
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(runs_dir, exist_ok=True)
    precision = study_precision(runs_dir, scale, sc.overrides.get("precision", "auto"), log)
    r = Runner(sc, scale, runs_dir, store_path, quiet, log, precision)
    t_all = time.perf_counter()
    est = SP.study_estimate(r.times, sc, skip=_same_as_stagger(r, sc, max(sc.ladder)))
    log(
        f"study {scale}: ≈ {est['total'] / 60:.0f} min if stage 2 runs at the largest rung "
        f"(calibration {est['calibration'] / 60:.0f}, first batch {est['first_batch'] / 60:.0f}, "
        f"others {est['others'] / 60:.0f}; at {r.times.s_per_step('stagger'):.2f} s/step) of "
        f"the {sc.budget_s / 60:.0f} min budget; extra seeds fill what is left"
    )
    log(
        f"\n== 1. calibration of length extrapolation: T={sc.seq_len}, rungs {list(sc.ladder)} steps"
    )
    t0 = time.perf_counter()
    cal, spent = _calibration(r, sc)
    rule = f"mean ≥ +{sc.min_rise:.0%} and > {sc.spread_k:g} std of its seeds above 0"
    log(
        f"   chosen: {cal['chosen']} steps — dense "
        + ("degrades measurably" if cal["degrades"] else "did not degrade measurably at any rung")
        + f" ({rule})"
    )
    t_cal = time.perf_counter() - t0
    log(
        f"\n== 2. stagger vs fixed (and {', '.join(sc.others)}) at {cal['chosen']} steps, W={sc.window}"
    )
    t0 = time.perf_counter()
    plan_path = os.path.join(runs_dir, f"{scale}-{PLAN_FILE}")
    cmp_ = _comparison(r, sc, cal["chosen"], spent, plan_path)
    cmp_["eval_noise"] = _noise(cmp_, runs_dir)
    t_cmp = time.perf_counter() - t0
    t0 = time.perf_counter()
    if cal["chosen"] < max(sc.ladder):
        log(f"\n== 3. stagger vs fixed with longer training: {max(sc.ladder)} steps")
    longer = _longer(r, sc, cal["chosen"], cmp_["estimated_s"])
    t_longer = time.perf_counter() - t0
    t0 = time.perf_counter()
    if sc.lab:
        log(
            f"\n== 4. the lab's arms beside the stagger at {cal['chosen']} steps: {', '.join(sc.lab)}"
        )
    lab = _lab(r, sc, cal["chosen"], (longer or cmp_)["estimated_s"])
    t_lab = time.perf_counter() - t0
    results = {
        "scale": "study",
        "size": scale,
        "precision": precision,
        "settings": {k: getattr(sc, k) for k in sc.__dataclass_fields__},
        "rule": rule,
        "calibration": cal,
        "comparison": cmp_,
        "longer": longer,
        "lab": lab,
        "step_times": r.times.to_json(),
        "timings_s": {
            "calibration": t_cal,
            "comparison": t_cmp,
            "longer": t_longer,
            "lab": t_lab,
        },
        "estimated_s": (lab or longer or cmp_)["estimated_s"],
        "trained": r.trained,
        "reused": r.reused,
        "evaluated": r.evaluated,
    }
    results["calibration"]["curve"] = {str(k): v for k, v in cal["curve"].items()}
    full = study_ledger(store_path) if store_path else None
    led = lm_entries(full) if full is not None else None
    results["verdicts"] = verdicts(cal, cmp_, sc, longer, _ledger_verdicts(led))
    if led is not None:
        results["ledger"] = [e.to_json() for e in led]
        results["lab_ledger"] = [e.to_json() for e in lab_lm_entries(full)]
    rep = study_report(results, led, lab_lm_entries(full) if full is not None else None)
    results["paths"] = rep.write(out_dir)
    if full is not None:
        results["paths"]["claims.json"] = full.write_json(os.path.join(out_dir, "claims.json"))
    with open(os.path.join(out_dir, "study.json"), "w") as f:
        jsonio.dump(results, f, indent=1, default=str)
    for v in results["verdicts"]:
        log(f"   [{v['verdict']}; at the rung: {v['answer']}] {v['claim']}: {v['line']}")
    log(
        f"\nstudy report: {results['paths'].get('report.md')}; {len(r.trained)} runs trained, "
        f"{len(r.reused)} reused; {(time.perf_counter() - t_all) / 60:.1f} min"
    )
    return results


def report_again(out_dir: str, store_path: str | None = None, runs_dir: str | None = None) -> dict:
    """Decide a finished study's verdicts again from its ``study.json`` (every run's numbers are
    in it) under today's rules, and rewrite study.json and the report — after a change of the
    decision rules, without training anything.  The ledger section needs the study's store
    (``store_path``); without it the report leaves the ledger out and says so. With the runs'
    folder (``runs_dir``) the evaluation noise is scored again too."""
    from analysis.experiments.study.report import study_report, verdicts

    path = os.path.join(out_dir, "study.json")
    with open(path) as f:
        res = json.load(f)
    sc = SP.StudyScale(**res["settings"])
    cal = res["calibration"]
    cal["curve"] = {int(k): v for k, v in cal["curve"].items()}
    if runs_dir:
        res["comparison"]["eval_noise"] = _noise(res["comparison"], runs_dir)
    full = study_ledger(store_path) if store_path else None
    led = lm_entries(full) if full is not None else None
    res["verdicts"] = verdicts(cal, res["comparison"], sc, res.get("longer"), _ledger_verdicts(led))
    res["ledger"] = [e.to_json() for e in led] if led is not None else None
    lab = lab_lm_entries(full) if full is not None else None
    res["lab_ledger"] = [e.to_json() for e in lab] if lab is not None else None
    rep = study_report(res, led, lab)
    if led is None:
        rep.text(
            "The claims ledger's section is left out: these verdicts were decided again from "
            "study.json alone (`analysis.experiments.study.study.report_again`), without the study's store."
        )
    res["calibration"]["curve"] = {str(k): v for k, v in cal["curve"].items()}
    res["paths"] = rep.write(out_dir)
    if full is not None:
        res["paths"]["claims.json"] = full.write_json(os.path.join(out_dir, "claims.json"))
    with open(path, "w") as f:
        jsonio.dump(res, f, indent=1, default=str)
    return res
