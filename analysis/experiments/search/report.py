"""The search's winners re-run on fresh seeds, beside the paper's stagger and coprime schedules.

The best of many trials is optimistic (it won partly by its seed), so the leading trials — the
best few of one objective, or the Pareto front of several — are evaluated again on seeds no trial
used, together with ``stagger`` and ``coprime`` under the same convention; `compare` then puts
each beside the stagger with `analysis.statistics.stats` (Welch's t-test and a bootstrap interval of the gap
when an objective trains a model and there are ≥ 2 seeds; a counting proxy is deterministic, so
one evaluation is the value).  Re-runs go into the store as runs of kind ``search-rerun``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from analysis.experiments.search.objectives import evaluate
from analysis.experiments.search.search import (
    METRIC_PREFIX,
    SearchConfig,
    SearchResult,
    require_optuna,
)
from analysis.statistics import stats

REFERENCES = ("stagger", "coprime")
RERUN_KIND = "search-rerun"
FRESH_SEED = 1000  # re-run seeds start here, after the study's own


def winners(study, objectives, top: int = 3) -> list:
    """The leading finished trials: the best ``top`` of one objective, else the Pareto front."""
    optuna = require_optuna()
    done = [
        t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE
    ]
    if len(objectives) > 1:
        return sorted(study.best_trials, key=lambda t: t.number)[:top]
    sign = -1.0 if objectives[0].direction == "maximize" else 1.0
    return sorted(done, key=lambda t: (sign * t.values[0], t.number))[:top]


def rerun(
    cfg: SearchConfig,
    result: SearchResult,
    store=None,
    top: int = 3,
    seeds: int = 3,
    log: Callable[[str], None] | None = None,
) -> list[dict]:
    """Rows (label, trial, seed, alphas, one value per objective) for winners and references."""
    trained = any(o.trained for o in cfg.objectives)
    fresh = [cfg.seed + FRESH_SEED + i for i in range(seeds if trained else 1)]
    entries = [
        (f"t{t.number:04d}", t.number, cfg.space.decode(t.params), t.params)
        for t in winners(result.study, cfg.objectives, top)
    ]
    for ref in REFERENCES:
        entries.append((ref, None, cfg.space.reference(ref), None))
    rows = []
    for label, number, cand, params in entries:
        for seed in fresh:
            task = cfg.task(params or {}, seed)
            if params is None:  # a reference: evaluate its candidate under the same task
                values = _evaluate_candidate(cfg, cand, seed)
            else:
                values = evaluate(task)
            row = {
                "label": label,
                "trial": number,
                "seed": seed,
                "alphas": list(cand.alphas),
                "base": cand.base,
                "window": cand.window,
                **values,
            }
            rows.append(row)
            if store is not None:
                run = f"search/{result.study_name}/rerun/{label}/s{seed}"
                store.start_run(
                    run,
                    {k: v for k, v in row.items() if k not in cfg.names}
                    | {"study": result.study_name},
                    kind=RERUN_KIND,
                    seed=seed,
                )
                store.log_metrics(run, 0, {METRIC_PREFIX + n: values[n] for n in cfg.names})
                store.log_alphas(run, 0, cand.alphas)
                store.set_status(run, "done")
            if log:
                log(
                    f"re-run {label} seed {seed}: "
                    + "  ".join(f"{n} {values[n]:.4g}" for n in cfg.names)
                )
    return rows


def _evaluate_candidate(cfg: SearchConfig, cand, seed: int) -> dict:
    """`evaluate` for a fixed candidate: a one-point space would do, so use free α values."""
    from dataclasses import replace

    space = replace(cfg.space, parts=("free",), base=cand.base, window=cand.window, name="free")
    params = {f"alpha_{i}": a for i, a in enumerate(cand.alphas)}
    task = replace(cfg.task(params, seed), space=space)
    return evaluate(task)


def compare(rows: list[dict], cfg: SearchConfig, against: str = "stagger") -> list[dict]:
    """Per label and objective: n, mean, std, the gap to ``against`` (positive: better) and, with
    ≥ 2 seeds a side, Welch's p (two-sided) and a 95 % bootstrap interval of the gap."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    out = []
    for o in cfg.objectives:
        ref = [r[o.name] for r in rows if r["label"] == against]
        lower = o.direction == "minimize"
        for label in labels:
            vals = [r[o.name] for r in rows if r["label"] == label]
            d = stats.summary(vals, label)
            line = {
                "label": label,
                "objective": o.name,
                "n": len(vals),
                "mean": d["mean"],
                "std": d.get("std", float("nan")),
                "gap_vs_" + against: stats.gap(vals, ref, lower_is_better=lower) + 0.0,
                "welch_p": float("nan"),
                "ci_low": float("nan"),
                "ci_high": float("nan"),
            }
            if label != against and len(vals) >= 2 and len(ref) >= 2:
                line["welch_p"] = stats.welch(vals, ref).p
                line["ci_low"], line["ci_high"] = stats.bootstrap_ci(
                    vals, ref, n=2000, lower_is_better=lower
                )
            out.append(line)
    return out


def format_compare(lines: list[dict], against: str = "stagger") -> str:
    """A plain table of `compare`'s lines."""
    head = f"{'schedule':<10} {'objective':<9} {'n':>2} {'mean':>9} {'gap vs ' + against:>15} {'Welch p':>8}  95% CI of the gap"
    out = [head]
    for x in lines:
        p = "" if math.isnan(x["welch_p"]) else f"{x['welch_p']:.3g}"
        ci = "" if math.isnan(x["ci_low"]) else f"[{x['ci_low']:.4g}, {x['ci_high']:.4g}]"
        out.append(
            f"{x['label']:<10} {x['objective']:<9} {x['n']:>2} {x['mean']:>9.4g} "
            f"{x['gap_vs_' + against]:>15.4g} {p:>8}  {ci}"
        )
    return "\n".join(out)
