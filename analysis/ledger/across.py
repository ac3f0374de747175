"""The claims ledger's checks across more than two configurations: the 2×2 of base × schedule
(§4.2: staggering and the base are additive), the seed-noise level (§4.7) and whether the
battery separates the schemes (§4.6).  One tier of LM runs each (`analysis.ledger.evidence`).

Additivity is a registered test (claims.toml: ``compare = [a, b, "additive", scope]``, a family
of its own): the interaction contrast of ln perplexity

    (ln a/fixed − ln a/stagger) − (ln b/fixed − ln b/stagger)

— the stagger's gain on base a minus its gain on base b, positive when it gains more on a — at
the W where all four cells have the most seeds, with a Welch t-interval (standard error
√Σ s²/n, Welch–Satterthwaite dof over the four cells) and TOST at the registered margin:
"additive" means the gains add, i.e. the interaction lies within ±margin. It is decided here by
`analysis.statistics.decide.settle` (a family of one: Holm leaves it as it is).

The seed-noise level is a threshold rule on the pooled standard deviation of ln perplexity over
the seeds of each configuration (sample std, every configuration with ≥ 2 seeds at one W),
against the paper's own Table 5 (`analysis.published.paper.seeds_w12`: the same pooled std of its
seeds): with a 95 % χ² interval for ours, *did not hold* when the paper's level lies outside
it, *held* when the interval lies within a factor of `FACTOR` of it, else *not shown*.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
from scipy import stats as _st

from analysis.ledger.checks import AT_CHANCE, Finding, Pair, chance_band
from analysis.ledger.evidence import runs_by_window
from analysis.statistics.decide import POWER, Comparison, Protocol, settle

__all__ = [
    "ACROSS_CHECKS",
    "FACTOR",
    "additive",
    "battery_separation",
    "interaction",
    "paper_noise",
    "seed_noise",
]

#: The seed noise "is" the paper's level when our interval lies within this factor of it.
FACTOR = 2.0


# --------------------------------------------------------------------------------------------
# the 2×2 (§4.2)
# --------------------------------------------------------------------------------------------
def interaction(cells: dict, pr: Protocol) -> Comparison:
    """The registered TOST of the interaction contrast (module docstring) from ``cells``
    {"aF", "aS", "bF", "bS": [ln ppl]} as a `Comparison` (n_a, n_b: the fewest seeds of a
    cell of each base; sigma: the pooled std of the four cells)."""
    x = {k: np.asarray(v, dtype=float) for k, v in cells.items()}
    eff = (x["aF"].mean() - x["aS"].mean()) - (x["bF"].mean() - x["bS"].mean())
    n_a, n_b = min(len(x["aF"]), len(x["aS"])), min(len(x["bF"]), len(x["bS"]))
    nan = math.nan
    if min(n_a, n_b) < 2:
        return Comparison(pr, n_a, n_b, float(eff), nan, (nan, nan), nan, None, nan)
    parts = [v.var(ddof=1) / len(v) for v in x.values()]
    se = math.sqrt(sum(parts))
    denom = sum(p**2 / (len(v) - 1) for p, v in zip(parts, x.values()))
    dof = se**4 / denom if denom > 0 else math.inf
    ss = sum(((v - v.mean()) ** 2).sum() for v in x.values())
    sigma = math.sqrt(ss / sum(len(v) - 1 for v in x.values()))
    m = pr.margin or 0.0
    if se == 0:
        lo = hi = float(eff)
        p_low, p_upp = float(eff <= -m), float(eff >= m)
        mde = 0.0
    else:
        h = float(_st.t.ppf(0.975, dof)) * se
        lo, hi = float(eff) - h, float(eff) + h
        p_low = float(_st.t.sf((eff + m) / se, dof))
        p_upp = float(_st.t.cdf((eff - m) / se, dof))
        mde = (float(_st.t.ppf(1 - pr.alpha / 2, dof)) + float(_st.t.ppf(POWER, dof))) * se
    p_out = min(1.0, 2.0 * min(1.0 - p_low, 1.0 - p_upp))
    cells_n = tuple(len(v) for v in x.values())  # its power is the contrast's, not a − b's
    return Comparison(pr, n_a, n_b, float(eff), sigma, (lo, hi), max(p_low, p_upp), p_out, mde,
                      cells=cells_n)  # fmt: skip


def additive(tier, a: str, b: str, pr: Protocol) -> Finding | None:
    """The 2×2 of bases ``a``, ``b`` × fixed / stagger at the W where all four cells have the
    most seeds (module docstring); None without all four."""
    names = {"aF": f"{a}/fixed", "aS": f"{a}/stagger", "bF": f"{b}/fixed", "bS": f"{b}/stagger"}
    by = {k: runs_by_window(tier, v) for k, v in names.items()}
    common = set.intersection(*(set(v) for v in by.values()))
    if not common:
        return None
    W = max(common, key=lambda w: (min(len(by[k][w]) for k in by), w or 0))
    cells = {k: [math.log(p) for _, p in by[k][W]] for k in by}
    c = interaction(cells, pr)
    (d,) = settle([c])
    gain = {
        base: float(np.mean(cells[f"{s}F"]) - np.mean(cells[f"{s}S"]))
        for base, s in ((a, "a"), (b, "b"))
    }
    n = {names[k]: len(v) for k, v in cells.items()}
    head = (
        f"the stagger's gain in ln ppl at W={W}: {a} {gain[a]:+.4f}, {b} {gain[b]:+.4f} "
        f"(seeds {', '.join(f'{k} {v}' for k, v in n.items())}); interaction "
        f"{c.gap:+.4f} nats"
        + ("" if math.isnan(c.ci[0]) else f", 95 % t-interval [{c.ci[0]:+.4f}, {c.ci[1]:+.4f}]")
        + f"; the paper's {pr.paper_effect:+.4f} (W=8, one seed a cell): {d.magnitude}"
    )
    runs = [r for k in by for r, _ in by[k][W]]
    stats = {"W": W, "gain_a": gain[a], "gain_b": gain[b], "seeds": n}
    # its test joins the family of the tier's data (`analysis.ledger.ledger.adjust`)
    test = Pair(f"{a} − {b} stagger gain", "0", W, (), (), c, d)
    return Finding(d.verdict, f"{head}; {d.wording(a=test.a, b=test.b, ahead='above')}", runs, {**d.stats(), **stats},
                   tests=[test], head=head, style="own")  # fmt: skip


# --------------------------------------------------------------------------------------------
# the seed-noise level (§4.7)
# --------------------------------------------------------------------------------------------
def _pooled(groups) -> tuple[float, int]:
    """(pooled sample std, its dof) of lists of values, each with ≥ 2 values."""
    groups = [np.asarray(g, dtype=float) for g in groups if len(g) >= 2]
    dof = sum(len(g) - 1 for g in groups)
    if not dof:
        return math.nan, 0
    return math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in groups) / dof), dof


def paper_noise() -> tuple[float, int]:
    """The paper's pooled sample std of ln ppl over the seeds of Table 5 (5 configurations at
    W = 12), and its dof."""
    from analysis.published.paper import seeds_w12

    t = seeds_w12()
    cols = [c for c in t.columns if c.startswith("seed")]
    groups = [[math.log(v) for v in row if not math.isnan(v)] for row in t[cols].to_numpy(float)]
    return _pooled(groups)


def seed_noise(tier) -> Finding | None:
    """The pooled std of ln ppl over seeds (sparse configurations, each W apart) against the
    paper's (module docstring)."""
    groups, runs, per = [], [], {}
    for label in sorted({r.label for r in tier.lms if r.label != "dense" and "=" not in r.label}):
        for W, rs in runs_by_window(tier, label).items():
            if len(rs) >= 2:
                v = [math.log(p) for _, p in rs]
                groups.append(v)
                runs += [n for n, _ in rs]
                per[f"{label}" + ("" if W is None else f" W={W}")] = float(np.std(v, ddof=1))
    s, dof = _pooled(groups)
    if not dof:
        return None
    sp, _ = paper_noise()
    lo = s * math.sqrt(dof / _st.chi2.ppf(0.975, dof))
    hi = s * math.sqrt(dof / _st.chi2.ppf(0.025, dof))
    here = (
        f"pooled std of ln ppl over seeds {s:.4f} (dof {dof}; 95 % interval [{lo:.4f}, "
        f"{hi:.4f}]): "
        + ", ".join(f"{k} {v:.4f}" for k, v in per.items())
        + f"; the paper's Table 5: {sp:.4f} (its 0.06–0.18 ppl at ≈ 42 ppl)"
    )
    stats = {"sigma": s, "dof": dof, "ci": [lo, hi], "paper_sigma": sp, "per_config": per}
    if not lo <= sp <= hi:
        side = "noisier" if lo > sp else "quieter"
        stats["magnitude"] = "outside"
        return Finding(
            "did not hold",
            here + f": ours is {side}, the paper's level lies outside the interval",
            runs,
            stats,
            "magnitude not reproduced",
        )
    stats["magnitude"] = "inside"
    if sp / FACTOR <= lo and hi <= FACTOR * sp:
        return Finding("held", here + f" (within a factor {FACTOR:g} of it)", runs, stats)
    return Finding(
        "not shown",
        here + f": too few seeds to place ours within a factor {FACTOR:g} of it",
        runs,
        stats,
    )


# --------------------------------------------------------------------------------------------
# does the battery separate the schemes? (§4.6)
# --------------------------------------------------------------------------------------------
def _homogeneity(rows) -> float:
    """χ² test p that every scheme has the same accuracy ({label: (correct, items)})."""
    table = np.array([[k, n - k] for k, n in rows.values()], dtype=float)
    if (table.sum(axis=0) == 0).any():  # every scheme all right or all wrong: no difference
        return 1.0
    return float(_st.chi2_contingency(table, correction=False).pvalue)


def battery_separation(tier) -> Finding | None:
    """Per battery task, a χ² test that the schemes (runs pooled per configuration) score
    alike, Holm over the tasks: *did not hold* when a task separates them; otherwise *not
    shown* — a test that finds no difference does not show there is none, and a battery at
    chance (every run within its chance band) is labelled so."""
    from analysis.statistics.decide import holm

    by: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    near, runs = True, []
    for r in tier.lms:
        for task, b in (r.battery or {}).items():
            k = by[task][r.label]
            k[0] += round(b["acc"] * b["n"])
            k[1] += b["n"]
            at = b.get("at_chance")
            near &= (
                at
                if at is not None
                else abs(b["acc"] - b["chance"]) <= chance_band(b["chance"], b["n"])
            )
            runs.append(r.name)
    tasks = {t: rows for t, rows in by.items() if len(rows) >= 2}
    if not tasks:
        return None
    p = dict(zip(tasks, holm([_homogeneity(rows) for rows in tasks.values()])))
    acc = {t: {k: c / n for k, (c, n) in rows.items()} for t, rows in tasks.items()}
    here = "; ".join(
        f"{t}: "
        + ", ".join(f"{k} {a:.3f}" for k, a in sorted(acc[t].items()))
        + f" (χ² p_Holm {p[t]:.2g})"
        for t in tasks
    )
    runs = sorted(set(runs))
    stats = {"p_adjusted": p, "acc": acc}
    if any(v < 0.05 for v in p.values()):
        return Finding("did not hold", here, runs, stats)
    if near:
        return Finding("not shown", here + "; every run at chance", runs, stats, AT_CHANCE)
    return Finding(
        "not shown", here + "; no difference found (which does not show there is none)", runs, stats
    )


ACROSS_CHECKS = {
    "t5-seed-noise-small": seed_noise,
    "bat-no-separation": battery_separation,
}
