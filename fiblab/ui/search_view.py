"""What notebook 06 shows of a running schedule search, read from its Optuna study, and its
figures in the lab's style (`analysis.figures.style`).

`search_view(study, cfg, top)` is a pure read: every finished trial's values, the best value so
far per objective (a step line over trial numbers), the Pareto front when there are several
objectives (the study's best trials), and the leading schedules' per-layer α
(`analysis.experiments.search.report.winners`, decoded by the search's own space) beside the linear stagger
under the same convention.  `progress_figure`, `front_figure` and `alpha_figure` draw it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from analysis.experiments.search.objectives import proxy_values
from analysis.experiments.search.report import winners
from analysis.experiments.search.search import SearchConfig, require_optuna
from analysis.figures import style

__all__ = [
    "SearchView",
    "search_view",
    "schedule_key",
    "progress_figure",
    "front_figure",
    "alpha_figure",
]

STAGGER_COLOR = style.config_color("fib/stagger")


@dataclass(frozen=True)
class Leader:
    label: str  # "t0007" or "stagger"
    values: tuple[float, ...]  # one per objective (the stagger's: counted ones only, else empty)
    alphas: tuple[float, ...]
    base: str
    window: int
    same: tuple[str, ...] = ()  # later trials that drew the same schedule

    @property
    def name(self) -> str:
        """'t0007', or 't0007 (= t0012, t0019)' when other trials drew the same schedule."""
        return self.label + (f" (= {', '.join(self.same)})" if self.same else "")


@dataclass(frozen=True)
class SearchView:
    """One read of a study.  ``points``: (trial number, values) of the completed trials in
    number order; ``best``: per objective, (trial number, best value so far) after each of
    them; ``front``: the trial numbers on the Pareto front (several objectives only);
    ``leaders``: the leading ``top`` trials, then the stagger; ``failed``: the trials told
    FAIL (a stop fails the trial it interrupts; an error fails its trial), which the study
    keeps but no count of finished trials includes."""

    names: tuple[str, ...]
    directions: tuple[str, ...]
    points: list[tuple[int, tuple[float, ...]]] = field(default_factory=list)
    best: list[list[tuple[int, float]]] = field(default_factory=list)
    front: list[int] = field(default_factory=list)
    leaders: list[Leader] = field(default_factory=list)
    failed: int = 0

    def best_value(self, i: int = 0) -> float | None:
        """The best value of objective ``i`` so far (None before a trial completed)."""
        return self.best[i][-1][1] if self.best and self.best[i] else None


def schedule_key(alphas, base, window) -> tuple:
    """What makes two trials the same schedule: α per layer (to 9 decimals), base, window."""
    return (tuple(round(float(a), 9) for a in alphas), str(base), int(window))


def best_so_far(points, direction: str, i: int = 0) -> list[tuple[int, float]]:
    """(number, running best of value ``i``) after each point, ``direction`` Optuna's word."""
    out, cur = [], None
    for number, values in points:
        v = values[i]
        if cur is None or (v > cur if direction == "maximize" else v < cur):
            cur = v
        out.append((number, cur))
    return out


def search_view(study, cfg: SearchConfig, top: int = 3) -> SearchView:
    optuna = require_optuna()
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    failed = sum(1 for t in trials if t.state == optuna.trial.TrialState.FAIL)
    done.sort(key=lambda t: t.number)
    points = [(t.number, tuple(float(v) for v in t.values)) for t in done]
    best = [best_so_far(points, d, i) for i, d in enumerate(cfg.directions)]
    front = sorted(t.number for t in study.best_trials) if len(cfg.names) > 1 and done else []
    leaders = []
    seen: dict[tuple, int] = {}  # a schedule → its row: a search re-samples good schedules
    for t in winners(study, cfg.objectives, len(done)) if done else []:
        c = cfg.space.decode(t.params)
        key = schedule_key(c.alphas, c.base, c.window)
        if key in seen:
            i = seen[key]
            leaders[i] = replace(leaders[i], same=leaders[i].same + (f"t{t.number:04d}",))
            continue
        if len(leaders) == top:
            continue
        seen[key] = len(leaders)
        leaders.append(Leader(f"t{t.number:04d}", tuple(t.values), c.alphas, c.base, c.window))
    ref = cfg.space.reference("stagger")
    ref_values: tuple[float, ...] = ()
    if not any(o.trained for o in cfg.objectives):  # counts cost milliseconds: show them
        counted = proxy_values(ref, cfg.space, cfg.names)
        ref_values = tuple(counted[n] for n in cfg.names)
    leaders.append(Leader("stagger", ref_values, ref.alphas, ref.base, ref.window))
    return SearchView(cfg.names, tuple(cfg.directions), points, best, front, leaders, failed)


def progress_figure(view: SearchView, total: int, running: bool = True):
    """Each completed trial's value (dots) and the best so far (a step line), one panel per
    objective, trial number on x: 0 … total − 1 while the search runs, to the last trial when
    it has ended (a search stopped at 18 of 400 trials is drawn over its 18)."""
    from matplotlib.ticker import MaxNLocator

    n = len(view.names)
    fig = style.figure(380 * n, 260)
    axes = fig.subplots(1, n, squeeze=False)[0]
    for i, (ax, name, d) in enumerate(zip(axes, view.names, view.directions)):
        xs = [p[0] for p in view.points]
        ax.scatter(xs, [p[1][i] for p in view.points], s=14, color="#949494", label="trial")
        b = view.best[i]
        ax.step([x for x, _ in b], [y for _, y in b], where="post", color="#0173b2", lw=1.8,
                label="best so far")  # fmt: skip
        last = max((p[0] for p in view.points), default=0) + 1
        ax.set_xlim(-0.5, max(total if running else last, 1) - 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("trial number")
        ax.set_ylabel(f"{name} ({'higher' if d == 'maximize' else 'lower'} is better)")
        ax.set_title(f"best {name} so far")
        ax.legend(fontsize="small", loc="best")
    return fig


def front_figure(view: SearchView):
    """Two objectives: every completed trial (grey) and the Pareto front (highlighted, joined
    in the order of the first objective)."""
    fig = style.figure(420, 320)
    ax = fig.subplots()
    on = set(view.front)
    rest = [v for n, v in view.points if n not in on]
    best = sorted({v for n, v in view.points if n in on}, key=lambda v: v[0])  # one dot a point
    trials = len(on)
    ax.scatter([v[0] for v in rest], [v[1] for v in rest], s=14, color="#949494", label="trial")
    words = f"{len(best)} point{'' if len(best) == 1 else 's'}" + (
        f", {trials} trials" if trials != len(best) else ""
    )
    ax.plot([v[0] for v in best], [v[1] for v in best], "o-", color="#d55e00", ms=5, lw=1.2,
            label=f"Pareto front ({words})")  # fmt: skip
    word = {"maximize": "↑ better", "minimize": "↓ better"}
    ax.set_xlabel(f"{view.names[0]} ({word[view.directions[0]].replace('↑', '→')})")
    ax.set_ylabel(f"{view.names[1]} ({word[view.directions[1]]})")
    ax.set_title("trials and the Pareto front")
    ax.legend(fontsize="small", loc="best")
    return fig


def alpha_figure(view: SearchView):
    """α per layer of the leading schedules (solid) beside the linear stagger (dashed)."""
    from matplotlib.ticker import MaxNLocator

    fig = style.figure(520, 280)
    ax = fig.subplots()
    for i, lead in enumerate(view.leaders):
        layers = list(range(len(lead.alphas)))
        if lead.label == "stagger":
            ax.plot(layers, lead.alphas, "--", color=STAGGER_COLOR, lw=1.6, label="linear stagger")
            continue
        vals = " ".join(f"{v:.4g}" for v in lead.values)
        ax.plot(layers, lead.alphas, "o-", ms=4, lw=1.4, color=style.config_color(lead.label, i),
                label=f"{lead.label} ({vals}; {lead.base} W={lead.window})")  # fmt: skip
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("layer ℓ")
    ax.set_ylabel("α")
    ax.set_title("α per layer: the leading schedules")
    style.min_span(ax, 0.2)
    style.legend_outside(ax)
    return fig
