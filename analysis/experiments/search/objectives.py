"""What a schedule search optimises, and `evaluate`: one trial's parameters → its objective values.

    distinct  maximise  distinct distances attended by any layer, window counted
                        (`probes.coverage`: 19 fixed vs 133 stagger at L=16, W=8, K=15, T=1024)
    band      maximise  share of distances 1..T−1 within ±W of an attended one (the soft band)
    reach     minimise  layers until every distance 0..T−1 is reachable through the stack
                        (`probes.receptive_field`; L + 1 when the whole stack never gets there)
    probe     maximise  the marked two-distance copy probe's mean accuracy at the given
                        distances, a model of the space's depth with the candidate's α, trained
                        at a probe scale (`probes.runner.run_cell`)
    ppl       minimise  held-out perplexity of a short LM run (the ``tiny`` training preset by
                        default) with the candidate's fixed α, in a temporary run folder

`evaluate(task, report)` is the seam a driver calls in-process or ships to a worker (a Ray task):
`TrialTask` is plain, picklable values; ``report(step, value) -> bool`` (in-process only) sees
intermediate values of a trained objective and returns True to stop the trial (a pruner), which
then raises `Pruned`.  Cheap proxies cost milliseconds; a probe trial trains a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from analysis.experiments.search.space import Candidate, SearchSpace
from lab.ladder.offsets import Ladder


@dataclass(frozen=True)
class Objective:
    name: str
    direction: str  # "maximize" | "minimize" (Optuna's words)
    trained: bool  # trains a model (seeded, can be pruned) rather than counting
    help: str


OBJECTIVES: dict[str, Objective] = {
    o.name: o
    for o in (
        Objective("distinct", "maximize", False, "distinct attended distances (window counted)"),
        Objective("band", "maximize", False, "share of 1..T-1 within ±W of an attended distance"),
        Objective("reach", "minimize", False, "layers until every distance is reachable"),
        Objective("probe", "maximize", True, "marked-copy probe accuracy at --distances"),
        Objective("ppl", "minimize", True, "held-out perplexity of a short LM run"),
    )
}


class Pruned(Exception):
    """A trial stopped early because `report` asked for it (the driver marks it pruned)."""


def parse_objectives(names: Sequence[str]) -> tuple[Objective, ...]:
    """Objective names (or one comma list) → records; one-line ValueError naming the choices."""
    flat = [n.strip() for name in names for n in str(name).split(",") if n.strip()]
    bad = [n for n in flat if n not in OBJECTIVES]
    if not flat or bad:
        raise ValueError(
            f"objective {', '.join(bad) or '(none)'} is unknown: use one or more of "
            f"{', '.join(OBJECTIVES)} (several at once give a Pareto front)"
        )
    if len(set(flat)) != len(flat):
        raise ValueError(f"objectives {flat} repeat a name: give each objective once")
    return tuple(OBJECTIVES[n] for n in flat)


@dataclass(frozen=True)
class ProbeSpec:
    """The probe objective's settings: a named probe scale, distances, steps (None: the scale's)."""

    scale: str = "tiny"
    distances: tuple[int, ...] = (5, 13)
    steps: int | None = None
    d_model: int | None = None


@dataclass(frozen=True)
class LMSpec:
    """The ppl objective's settings: a training preset (`lab.training.trainconfig`), steps, data source."""

    preset: str = "tiny"
    steps: int | None = None
    data: str | None = None


@dataclass(frozen=True)
class TrialTask:
    """Everything `evaluate` needs, as plain values (what a worker receives)."""

    space: SearchSpace
    params: dict
    objectives: tuple[str, ...]
    seed: int = 0
    probe: ProbeSpec = field(default_factory=ProbeSpec)
    lm: LMSpec = field(default_factory=LMSpec)
    rounding: str = "round"

    def candidate(self) -> Candidate:
        return self.space.decode(self.params)


def layers_to_reach(fractions: Sequence[float]) -> int:
    """1-based first layer whose reachable share is 1 (every distance); len + 1 if none."""
    for ell, f in enumerate(fractions, start=1):
        if f >= 1.0:
            return ell
    return len(fractions) + 1


def proxy_values(
    cand: Candidate, space: SearchSpace, names: Sequence[str], rounding: str = "round"
) -> dict[str, float]:
    """The counting objectives among ``names`` for one candidate."""
    from lab.ladder.plan import layer_sets
    from probes.coverage import band_mask
    from probes.receptive_field import reachable_fraction

    T = space.seq_len
    sets = layer_sets(
        list(cand.alphas),
        T,
        Ladder(cand.window, base=cand.base, rungs=space.rungs, rounding=rounding),
    )
    union = sorted(set().union(*sets))
    out: dict[str, float] = {}
    if "distinct" in names:
        out["distinct"] = float(len(union))
    if "band" in names:
        mask = band_mask(union, cand.window, T)
        out["band"] = float(mask[1:].mean()) if T > 1 else 1.0
    if "reach" in names:
        out["reach"] = float(layers_to_reach(reachable_fraction(sets, T)))
    return out


def probe_value(
    task: TrialTask, cand: Candidate, report: Callable[[int, float], bool] | None = None
) -> float:
    """Mean accuracy of a marked-copy probe with the candidate's fixed α (seeded by the task).

    The pruner sees the training loss, negated (higher is better, as accuracy), every 25 steps.
    """
    from dataclasses import replace

    import torch

    from lab.lm.model import build_model
    from probes.runner import run_cell
    from probes.settings import SCALES, Cell

    spec, space = task.probe, task.space
    if spec.scale not in SCALES:
        raise ValueError(f"probe scale {spec.scale!r} is unknown: use one of {tuple(SCALES)}")
    base = SCALES[spec.scale]
    for d in spec.distances:
        if not 0 < d < space.seq_len - 1:
            raise ValueError(
                f"probe distance {d} must lie in 1..{space.seq_len - 2} (the probe length "
                f"T={space.seq_len}): pass smaller --distances or a larger --seq-len"
            )
    settings = replace(
        base,
        window=cand.window,
        rungs=space.rungs,
        steps=spec.steps or base.steps,
        d_model=spec.d_model or base.d_model,
        task=replace(base.task, seq_len=space.seq_len, distances=tuple(spec.distances)),
    )
    torch.manual_seed(task.seed)
    model = build_model(
        "probe-small",
        n_layers=space.layers,
        window=cand.window,
        rungs=space.rungs,
        base=cand.base,
        schedule=tuple(cand.alphas),
        d_model=settings.d_model,
        vocab_size=settings.task.vocab,
        seq_len=space.seq_len,
    )

    def on_step(cell, done, total, loss, seconds, alphas):
        if report is not None and done < total and report(done, -float(loss)):
            raise Pruned(f"pruned at step {done} of {total}")

    cell = Cell(mechanism="searched", depth=space.layers, init="-", seed=task.seed)
    rec = run_cell(cell, settings, progress=False, on_step=on_step, model=model)
    acc = [rec["acc"][str(d)] for d in spec.distances]
    return float(sum(acc) / len(acc))


def ppl_value(task: TrialTask, cand: Candidate) -> float:
    """Held-out perplexity after a short LM run with the candidate's α (mean over domains)."""
    import tempfile

    from lab.training.train import train
    from lab.training.trainconfig import make_config

    space, spec = task.space, task.lm
    over = {
        "model.schedule": tuple(cand.alphas),
        "model.n_layers": space.layers,
        "model.window": cand.window,
        "model.rungs": space.rungs,
        "model.base": cand.base,
        "model.seq_len": space.seq_len,
        "seed": task.seed,
        "name": "trial",
    }
    if spec.steps:
        over["steps"] = spec.steps
    if spec.data:
        over["data"] = spec.data
    with tempfile.TemporaryDirectory(prefix="fiblab-search-") as tmp:
        cfg = make_config(spec.preset, {**over, "run_dir": tmp})
        if cfg.tokens_per_step % (cfg.micro_batch * space.seq_len):
            cfg = make_config(
                spec.preset,
                {**over, "run_dir": tmp, "tokens_per_step": cfg.micro_batch * space.seq_len},
            )
        res = train(cfg, quiet=True)
    ppl = list(res["final_ppl"].values())
    return float(sum(ppl) / len(ppl))


def evaluate(
    task: TrialTask, report: Callable[[int, float], bool] | None = None
) -> dict[str, float]:
    """The objective values of one trial, by name (the one seam every dispatcher calls)."""
    cand = task.candidate()
    out = proxy_values(cand, task.space, task.objectives, task.rounding)
    if "probe" in task.objectives:
        out["probe"] = probe_value(task, cand, report)
    if "ppl" in task.objectives:
        out["ppl"] = ppl_value(task, cand)
    return {name: out[name] for name in task.objectives}
