"""The claims ledger's evidence: what the store (and the lab's stored probe grids) hold, grouped
into tiers of one scale each and ranked, so that the ledger decides every claim on the strongest.

A *tier* is results that may be compared with one another: LM runs of one training setup (scale,
steps, training length, model size), or probe records of one scale.  Ranks, strongest first:

- LM runs: ``paper`` (≥ 13,000 steps at d_model ≥ 512) > ``study`` (config ``scale`` ==
  "study" or a name starting ``study-``: `fiblab demo --scale study`) > ``other`` (any other
  run) > ``demo`` (a name starting ``demo-``: the main job's short runs) > ``smoke``; within a
  scale, more training tokens rank higher.  Demo and smoke tiers are too small to decide an LM
  claim (``decides=False``): the ledger reports their numbers and says so.
- probe records: ``paper`` (distances 200 and 350, ≥ 2,500 steps: the paper's Table 2 grid) >
  ``quick`` (the paper's task, fewer steps) > ``reduced`` (the demo's T=256 probe, tiny ones).
- efficiency: one tier a stored attention benchmark (``benchmark``).

Sources: `from_store` (any store: LM runs with their evaluations, α and battery results; probe
cells), `analysis.experiments.demo.evidence.from_demo` (the main job's in-memory results), `stored_grids` (the lab's paper-scale
Table 2 grids under benchmarks/results) and `stored_timings` (its attention timings,
benchmarks/attention-*.json), when the checkout has them.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field

from lab.util import jsonio
from lab.util.wording import plural

__all__ = [
    "LMRun",
    "Tier",
    "Evidence",
    "probe_scale",
    "lm_scale",
    "group_lms",
    "group_probes",
    "from_store",
    "store_lms",
    "stored_grids",
    "stored_timings",
    "run_label",
    "timing_tiers",
    "store_battery",
    "runs_by_window",
]

#: The paper's Table 2 task: its two distances and its steps (probes.settings.SCALES["paper"]).
PAPER_DISTANCES, PAPER_STEPS = frozenset({"200", "350"}), 2500
#: The checkout this module lies in (benchmarks/ beside analysis/; an installed copy has none).
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LM_RANK = {"paper": 4, "study": 3, "other": 2, "demo": 1, "smoke": 0}
PROBE_RANK = {"paper": 3, "quick": 2, "reduced": 1}


@dataclass(frozen=True)
class LMRun:
    """One language-model run as the ledger's checks read it (NaN / None: not measured)."""

    name: str
    label: str  # "dense", "fib/stagger", "pow2/fixed", … (`lab.ladder.schemes.paper_label`)
    W: int | None = None
    seed: int | None = None
    ppl: float = math.nan  # held-out perplexity at the training length
    ext: dict = field(default_factory=dict)  # {factor: ppl}, rung set recomputed
    frozen: dict = field(default_factory=dict)  # {factor: ppl}, rung set frozen
    same_tokens: float | None = None  # % ppl change of blocks j ≥ 1 vs the same tokens alone
    bins: tuple | None = None  # mean NLL per position bin
    drift: float | None = None  # learned α: max |α − α_init|
    battery: dict | None = None  # {task: {"acc", "chance", "n"}}


@dataclass(frozen=True)
class Tier:
    """Results of one scale that may be compared with one another."""

    kind: str  # "lm" or "probe"
    scale: str
    rank: tuple
    setup: str  # how the tier was made, in words
    decides: bool = True  # False: too small to decide an LM claim (demo / smoke runs)
    lms: tuple = ()
    records: tuple = ()
    timings: tuple = ()  # efficiency tiers: rows of a stored attention benchmark
    steps: int | None = None  # an LM tier's training steps and length (the registered tier's
    seq_len: int | None = None  # rule reads them: claims.toml [protocol] tier)

    @property
    def label(self) -> str:
        return f"{self.scale}: {self.setup}"


@dataclass
class Evidence:
    """Every tier the ledger can use, plus an optional precomputed coverage stage."""

    tiers: list = field(default_factory=list)
    coverage: dict | None = None
    sources: list = field(default_factory=list)

    def of(self, kind: str) -> list[Tier]:
        """The tiers of ``kind``, strongest first."""
        return sorted((t for t in self.tiers if t.kind == kind), key=lambda t: t.rank, reverse=True)


# --------------------------------------------------------------------------------------------
# ranking
# --------------------------------------------------------------------------------------------
def probe_scale(record: dict) -> str:
    """``paper``, ``quick`` or ``reduced``: how close a probe record is to the paper's grid."""
    if frozenset(str(d) for d in record.get("acc", {})) != PAPER_DISTANCES:
        return "reduced"
    return "paper" if int(record.get("steps") or 0) >= PAPER_STEPS else "quick"


def lm_scale(name: str, config: dict) -> str:
    """``paper``, ``study``, ``other``, ``demo`` or ``smoke`` (see the module docstring)."""
    scale = str(config.get("scale") or "")
    if scale.endswith("smoke") or name.startswith("study-smoke"):
        return "smoke"  # the study's smoke scale too: seconds of training decide nothing
    if scale == "study" or name.startswith("study-"):
        return "study"
    model = config.get("model") or {}
    if int(config.get("steps") or 0) >= 13000 and int(model.get("d_model") or 0) >= 512:
        return "paper"
    if scale == "demo" or name.startswith("demo-"):
        return "demo"
    return "other"


def group_lms(runs: list[tuple[LMRun, str, dict]]) -> list[Tier]:
    """LM tiers from ``(run, scale, setup)`` triples, ``setup`` holding steps, seq_len, d_model,
    n_layers (a missing one: unknown, equal to another unknown)."""
    groups: dict[tuple, list] = {}
    for run, scale, setup in runs:
        key = (scale, *(setup.get(k) for k in ("steps", "seq_len", "d_model", "n_layers")))
        groups.setdefault(key, []).append(run)
    out = []
    for (scale, steps, seq_len, d, n), lms in groups.items():
        tokens = (steps or 0) * (seq_len or 0)
        words = f"{len(lms)} LM runs, {steps} steps, T={seq_len}, d_model {d}, {n} layers"
        out.append(
            Tier(
                "lm",
                scale,
                (LM_RANK[scale], tokens),
                words,
                scale not in ("demo", "smoke"),
                lms=tuple(lms),
                steps=steps,
                seq_len=seq_len,
            )
        )
    return out


def _precision(r: dict) -> str:
    settings = r.get("settings") if isinstance(r.get("settings"), dict) else {}
    return str(settings.get("precision") or r.get("precision") or "fp32")


def cell_key(r: dict):
    """What makes two probe records one cell: the same run of one seed, whatever precision it
    was computed in (claims.toml R6: a seed's bf16 and fp32 twins count once)."""
    key = r.get("key")
    if key:
        return re.sub(r"/(bf16|fp32)$", "", key)
    return (r["mechanism"], r["depth"], r["init"], r["seed"], r["steps"], tuple(sorted(r["acc"])))


def group_probes(records: list[dict], where: str) -> list[Tier]:
    """Probe tiers (one per scale) from records, one record a cell (`cell_key`): the fp32 twin
    where a seed was run in both precisions, else the first."""
    seen, by = set(), {}
    for r in sorted(records, key=lambda r: _precision(r) != "fp32"):  # stable: fp32 first
        key = cell_key(r)
        if key in seen or r.get("task", "marked") != "marked" or r.get("mechanism") != "blur":
            continue
        seen.add(key)
        by.setdefault(probe_scale(r), []).append(r)
    out = []
    for scale, recs in by.items():
        steps = sorted({int(r.get("steps") or 0) for r in recs})
        dists = sorted({int(d) for r in recs for d in r["acc"]})
        words = (
            f"{plural(len(recs), 'marked-probe cell')}, distances {dists}, "
            f"{'/'.join(map(str, steps))} steps ({where})"
        )
        out.append(
            Tier("probe", scale, (PROBE_RANK[scale], max(steps)), words, records=tuple(recs))
        )
    return out


# --------------------------------------------------------------------------------------------
# sources
# --------------------------------------------------------------------------------------------
def stored_grids(root: str | None = None) -> list[str]:
    """The lab's stored probe grids (benchmarks/results/probe-*.jsonl of this checkout; none in
    an installed copy)."""
    root = root or CHECKOUT
    return sorted(glob.glob(os.path.join(root, "benchmarks", "results", "probe-*.jsonl")))


def stored_timings(root: str | None = None) -> list[str]:
    """The lab's stored attention timings (benchmarks/attention-*.json of this checkout, written
    by ``benchmarks/attention.py --json``; none in an installed copy)."""
    root = root or CHECKOUT
    return sorted(glob.glob(os.path.join(root, "benchmarks", "attention-*.json")))


def timing_tiers(paths) -> list[Tier]:
    """One efficiency tier a stored timing file (its rows: T, row, fwd_ms, …)."""
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
        rows = rows.get("rows", []) if isinstance(rows, dict) else rows
        where = _shown_path(path)
        out.append(
            Tier(
                "efficiency",
                "benchmark",
                (1, len(rows)),
                f"attention timings, {where}",
                timings=tuple({**r, "source": where} for r in rows),
            )
        )
    return out


def _shown_path(path: str) -> str:
    """A grid file as a reader finds it: relative to this checkout when it lies in it
    (benchmarks/results/…, whatever the working folder), else as given."""
    root = CHECKOUT
    full = os.path.abspath(path)
    return os.path.relpath(full, root) if full.startswith(root + os.sep) else path


def read_grid(path: str) -> list[dict]:
    return jsonio.read_rows(path)


def store_battery(store) -> dict[str, dict]:
    """{run: {task: {"acc", "chance", "n", "at_chance"?}}} from ``store.battery()`` (the
    battery results' reader, `fiblab battery`; absent in stores of older versions: then {}).
    ``n`` is the items scored (``items``, else ``n``); a run scored several times keeps its
    last row; ``at_chance`` is the reader's own chance test where it has one."""
    reader = getattr(store, "battery", None)
    if reader is None:
        return {}
    df = reader()
    out: dict[str, dict] = {}
    for r in df.to_dict("records"):
        acc = r.get("accuracy", r.get("acc"))
        n = r.get("items", r.get("n"))
        row = {"acc": float(acc), "chance": float(r["chance"]), "n": int(n)}
        if r.get("at_chance") is not None and not isinstance(r.get("at_chance"), float):
            row["at_chance"] = bool(r["at_chance"])
        out.setdefault(r["run"], {})[r["task"]] = row
    return out


def _pick(datasets) -> str | None:
    have = sorted(set(datasets))
    return "fineweb_edu" if "fineweb_edu" in have else (have[0] if have else None)


def run_label(label: str, model: dict) -> str:
    """The paper label a run is compared under: a coprime run whose α are exactly the stagger's
    at its depth (`lab.ladder.schedules.coprime_is_stagger`, e.g. 4 layers) is ``…/coprime=stagger``,
    which no claim compares: it would tie the stagger by being the same model."""
    from lab.ladder.schedules import coprime_is_stagger

    L = model.get("n_layers")
    if label.endswith("/coprime") and isinstance(L, int) and L > 0:
        if coprime_is_stagger(model.get("schedule"), L, model.get("coprime_stride")):
            return label + "=stagger"
    return label


def store_lms(store, runs=None) -> list[tuple[LMRun, str, dict]]:
    """(run, scale, setup) of every finished LM run of the store (``runs``: these only), as the
    ledger reads them."""
    from analysis.figures import trajectories
    from analysis.tables.runs import final_step_rows, lm_evals, same_tokens_basis
    from lab.ladder.drift import alpha_drift

    ev = lm_evals(store, runs=runs)
    if ev.empty:
        return []
    bat = store_battery(store)
    tr = trajectories.from_store(store, kinds=("lm",))
    out = []
    for name, g in ev.groupby("run", sort=False):
        config = store.config(name)
        ds = _pick(g["dataset"])
        g = g[g["dataset"] == ds]
        T = int(g["seq_len"].iloc[0])
        last = final_step_rows(
            g,
            lambda k: (
                k in ("recompute", "freeze", "recompute:block0", "freeze:block0") or k[:3] == "bin"
            ),
        )
        at_T = last[(last["kind"] == "recompute") & (last["context_len"] == T)]["perplexity"]
        last = same_tokens_basis(last)  # ppl(cT)/ppl(T) on the same text (tables_store)
        full = last[last["kind"] == "recompute"].set_index("context_len")["perplexity"]
        frz = last[last["kind"] == "freeze"].set_index("context_len")["perplexity"]
        bins = last[last["kind"].str.startswith("bin") & (last["context_len"] == T)]
        bins = bins.assign(b=bins["kind"].str[3:].astype(int)).sort_values("b")
        model = config.get("model") or {}
        label = run_label(str(g["config"].iloc[0]), model)
        drift = None
        if label.endswith("learned") and (tr["run"] == name).any():
            pts = trajectories.run_points(tr, name)
            drift = alpha_drift(pts["points"], pts["init"])
        run = LMRun(
            name=name,
            label=label,
            W=None if g["W"].isna().iloc[0] else int(g["W"].iloc[0]),
            seed=None if g["seed"].isna().iloc[0] else int(g["seed"].iloc[0]),
            ppl=float(at_T.iloc[0]) if len(at_T) else math.nan,  # the fullest evaluation at T
            ext={int(c // T): float(p) for c, p in full.items() if c % T == 0},
            frozen={int(c // T): float(p) for c, p in frz.items() if c % T == 0},
            bins=tuple(float(x) for x in bins["loss"]) if len(bins) else None,
            drift=drift,
            battery=bat.get(name),
        )
        setup = {
            "steps": config.get("steps"),
            "seq_len": T,
            "d_model": model.get("d_model"),
            "n_layers": model.get("n_layers"),
        }
        out.append((run, lm_scale(name, config), setup))
    return out


def probe_tiers(store_recs, extra, grids) -> tuple[list[Tier], list[str]]:
    """One tier a probe scale, pooling the store's cells, ``extra`` records and the grid files
    (a cell in several is counted once, by its key)."""
    recs, where = list(store_recs) + list(extra or []), ["the store"] if store_recs else []
    for path in grids:
        recs += read_grid(path)
        where.append(_shown_path(path))
    return group_probes(recs, ", ".join(where) or "given records"), where


def from_store(
    store, probe_records: list[dict] | None = None, grids=(), runs=None, timings=()
) -> Evidence:
    """Every tier a store can give: its LM runs (grouped by setup) and its probe cells (plus
    ``probe_records`` from JSONL files and the ``grids`` files), and the ``timings`` files'
    efficiency tiers; ``runs`` names the LM runs to use (default: every finished one)."""
    from probes.record import records_from_store

    ev = Evidence(sources=[f"store {store.path}"])
    ev.tiers += group_lms(store_lms(store, runs))
    recs = [r.to_dict() for r in records_from_store(store)]
    tiers, where = probe_tiers(recs, probe_records, grids)
    ev.tiers += tiers
    ev.sources += [w for w in where if w != "the store"]
    add_timings(ev, timings)
    return ev


def add_timings(ev: Evidence, timings) -> None:
    for t in timing_tiers(timings):
        ev.tiers.append(t)
        ev.sources.append(t.timings[0]["source"] if t.timings else t.setup)


def runs_by_window(tier, label) -> dict:
    """{W: [(run, ppl)]} of one configuration's finished runs (with a perplexity): what every
    comparison over seeds reads, pairwise in `analysis.ledger.compare`, across configurations in `analysis.ledger.across`."""
    out = defaultdict(list)
    for r in tier.lms:
        if r.label == label and not math.isnan(r.ppl):
            out[r.W].append((r.name, r.ppl))
    return out
