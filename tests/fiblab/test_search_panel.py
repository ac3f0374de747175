"""Notebook 06's panel without a browser: a tiny search launched as a separate process finishes;
what the panel shows (trials done, best so far, the leaders) equals what Optuna reads from the
study on its own; stop stops a long search; a fresh panel (a kernel restart) lists both searches
and attaches them; bad input fails before anything starts."""

import os
import time

import optuna
import pytest

from fiblab.jobs import search_launch as SL
from fiblab.ui.search_panel import SearchPanel
from lab.store import Store

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    d = tmp_path_factory.mktemp("search-panel")
    return {"store": str(d / "store.db"), "runs": str(d / "runs")}


@pytest.fixture(scope="module")
def finished(where):
    p = SearchPanel(
        objectives=("distinct",),
        trials=6,
        layers=4,
        auto_refresh=False,
        env={"OMP_NUM_THREADS": "1"},
        **where,
    )
    p.run(timeout=120)
    return p


def _study(h):
    return optuna.load_study(study_name=h.name, storage=h.storage)


def test_a_tiny_search_finishes_and_the_panel_shows_the_studys_best(finished, where):
    p, h = finished, finished.handle
    assert p.state == "done" and p.error is None
    assert h.folder == os.path.join(where["runs"], "searches", "linear-distinct-s0")
    study = _study(h)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 6
    best = max(t.value for t in complete)  # distinct is maximised
    assert best == study.best_value
    assert p.view.best_value(0) == best
    assert "6 / 6" in p.count.value and f">{best:.6g}<" in p.best.value
    assert "show 6 completed trials" in p.drawn.value
    # the running best, by hand, after each trial in number order
    hand, cur = [], -1
    for t in sorted(complete, key=lambda t: t.number):
        cur = max(cur, t.value)
        hand.append((t.number, cur))
    assert p.view.best[0] == hand
    # the leaders: the three best values, then the stagger 0.5 → 1.5 over 4 layers
    assert [x.values[0] for x in p.view.leaders[:3]] == sorted(
        (t.value for t in complete), reverse=True
    )[:3]
    assert p.view.leaders[-1].label == "stagger"
    assert p.view.leaders[-1].alphas == pytest.approx((0.5, 5 / 6, 7 / 6, 1.5))
    # the stagger's count beside the leaders, by brute force: the window 0..8 and every
    # rounded α·f below T = 1024 over the 4 layers (K = 15 Fibonacci rungs)
    fib = [1, 2]
    while len(fib) < 15:
        fib.append(fib[-1] + fib[-2])
    union = set(range(9))
    for a in (0.5, 0.5 + 1 / 3, 0.5 + 2 / 3, 1.5):
        union |= {round(a * f) for f in fib if round(a * f) < 1024}
    assert p.view.leaders[-1].values == (float(len(union)),)
    first = p.view.leaders[0]
    trial = next(t for t in complete if f"t{t.number:04d}" == first.label)
    a0, a1 = trial.params["alpha_first"], trial.params["alpha_last"]
    assert first.alphas == pytest.approx([a0 + (a1 - a0) * i / 3 for i in range(4)])
    assert bytes(p.progress_image.value)[:8] == PNG and bytes(p.alpha_image.value)[:8] == PNG
    assert p.front_image.layout.display == "none"  # one objective: no front
    with Store(where["store"]) as st:
        runs = st.runs()
    assert (runs["kind"] == "search").sum() == 6


def test_stop_stops_a_long_search_and_a_fresh_panel_lists_and_attaches_both(finished, where):
    p = SearchPanel(
        objectives=("distinct", "band"),
        trials=100_000,
        layers=4,
        name="long",
        auto_refresh=False,
        **where,
    )
    h = p.launch()
    deadline = time.monotonic() + 90
    while p.refresh().done < 2:
        assert time.monotonic() < deadline, h.log_tail()
        time.sleep(0.3)
    assert p.state == "running" and not p.stop_button.disabled
    asked = time.monotonic()
    p.stop()
    assert time.monotonic() - asked < 15
    assert p.state == "stopped" and not h.is_alive()
    assert not p.resume_button.disabled and p.stop_button.disabled
    done = p.snap.done
    assert 2 <= done < 100_000
    # the trial the stop interrupted is failed, not left running (study and store)
    running = _study(h).get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert running == []
    with Store(where["store"]) as st:
        rows = st.runs()
    long = rows[rows["name"].str.startswith("search/long/")]
    assert "running" not in set(long["status"])
    assert p.front_image.layout.display is None  # two objectives: the front is drawn
    on_front = {t.number for t in _study(h).best_trials}
    assert set(p.view.front) == on_front

    fresh = SearchPanel(auto_refresh=False, **where)  # after a kernel restart
    rows = {r.name: r.state for r in fresh.runlist.rows}
    assert rows == {"linear-distinct-s0": "done", "long": "stopped"}
    fresh.attach("long")
    assert fresh.objectives.value == ("distinct", "band") and fresh.layers.value == 4
    assert fresh.trials.value == 100_000 and fresh.name.value == "long"
    assert fresh.snap.done == done and fresh.state == "stopped"
    fresh.attach("linear-distinct-s0")
    assert fresh.state == "done" and fresh.view.best_value(0) == finished.view.best_value(0)


def test_bad_input_fails_before_anything_starts(finished, where, tmp_path):
    p = SearchPanel(space="diagonal", auto_refresh=False, store="", runs=str(tmp_path))
    p._on_launch()
    assert "search space 'diagonal' is unknown" in p.error
    assert not os.path.exists(os.path.join(str(tmp_path), "searches"))
    p.space.value, p.objectives.value = "linear", ()
    p._on_launch()
    assert p.error.startswith("no objective chosen")
    clash = SearchPanel(
        objectives=("band",), name="linear-distinct-s0", auto_refresh=False, **where
    )
    clash._on_launch()
    assert "already exists for linear / distinct" in clash.error


def test_the_view_of_a_two_objective_study_and_its_figures():
    """In memory, no process: the front equals a brute-force domination check, the best so far a
    hand running max; every figure has labelled axes and a legend, shown at its pixel size."""
    import ipywidgets as W

    from analysis.experiments.search.objectives import parse_objectives
    from analysis.experiments.search.search import SearchConfig, run_search
    from analysis.experiments.search.space import parse_space
    from analysis.figures.style import png
    from fiblab.ui.common import set_png
    from fiblab.ui.search_view import alpha_figure, front_figure, progress_figure, search_view

    space = parse_space("free", layers=3, window=2, rungs=6, seq_len=96)
    cfg = SearchConfig(space, parse_objectives(["distinct", "reach"]), trials=12, seed=3)
    study = run_search(cfg).study
    v = search_view(study, cfg)
    pts = dict(v.points)
    assert len(pts) == 12

    def dominates(a, b):  # distinct up, reach down
        return a[0] >= b[0] and a[1] <= b[1] and a != b

    front = sorted(n for n, x in pts.items() if not any(dominates(y, x) for y in pts.values()))
    assert v.front == front
    run, hand = float("-inf"), []
    for n in sorted(pts):
        run = max(run, pts[n][0])
        hand.append((n, run))
    assert v.best[0] == hand and v.best_value(1) == min(x[1] for x in pts.values())
    assert [x.label for x in v.leaders] == [f"t{n:04d}" for n in front][:3] + ["stagger"]
    for fig in (progress_figure(v, 12), front_figure(v), alpha_figure(v)):
        axes = [a for a in fig.axes if a.collections or a.get_lines()]
        assert axes and all(a.get_xlabel() and a.get_ylabel() and a.get_legend() for a in axes)
        data, image = png(fig), W.Image(format="png")
        set_png(image, data)
        w, h = (round(x) for x in fig.get_size_inches() * fig.dpi)
        assert (image.width, image.height) == (str(w), str(h))


def test_the_count_line_names_the_failed_trials_a_stop_leaves(tmp_path):
    """Issue 42: a stop tells FAIL to the trial it interrupts, and the panel never said so.  In
    memory, no process: a study of 3 completed trials and 1 failed one (as a stop leaves it)
    shows "3 / 100" and "1 failed" in the count line; without a failed trial, no such words."""
    from analysis.experiments.search.objectives import parse_objectives
    from analysis.experiments.search.search import SearchConfig, run_search
    from analysis.experiments.search.space import parse_space
    from fiblab.ui.search_view import search_view

    space = parse_space("linear", layers=4)
    cfg = SearchConfig(space, parse_objectives(["distinct"]), trials=3, seed=0)
    study = run_search(cfg).study
    p = SearchPanel(
        objectives=("distinct",),
        trials=100,
        layers=4,
        render=False,
        auto_refresh=False,
        store=str(tmp_path / "store.db"),
        runs=str(tmp_path / "runs"),
    )
    p.handle = SL.SearchHandle(
        name="s", runs_dir=p.runs, store="", pid=-1, command=[], folder=str(tmp_path),
        space="linear", objectives=["distinct"], trials=100, seed=0, storage="",
    )  # fmt: skip
    p.view = search_view(study, cfg)
    p._render(SL.SearchState("s", "stopped", 3, 100))
    assert "3 / 100" in p.count.value and "failed" not in p.count.value
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)  # what a stop leaves
    p.view = search_view(study, cfg)
    assert p.view.failed == 1 and len(p.view.points) == 3
    p._render(SL.SearchState("s", "stopped", 3, 100))
    assert "3 / 100" in p.count.value
    assert "1 failed</span> (interrupted by a stop" in p.count.value


def test_identical_schedules_are_one_row_and_the_front_counts_points(tmp_path):
    """Issue 28 item 5: a search that draws one schedule three times shows it as one row of the
    leaders (naming the other trials) and the front's legend counts points, not trials."""
    from analysis.experiments.search.objectives import parse_objectives
    from analysis.experiments.search.search import SearchConfig, run_search
    from analysis.experiments.search.space import parse_space
    from fiblab.ui.search_view import front_figure, schedule_key, search_view

    space = parse_space("linear", layers=4)
    cfg = SearchConfig(
        space,
        parse_objectives(["distinct", "band"]),
        trials=8,
        seed=0,
        storage=f"sqlite:///{tmp_path / 's.db'}",
    )
    study = optuna.create_study(
        study_name=cfg.default_study_name(), storage=cfg.storage, directions=cfg.directions
    )
    best = {"alpha_first": 0.9375872112626925, "alpha_last": 1.3917730007820799}
    for _ in range(3):  # the schedule seed 0's sampler draws as trial 6: it dominates the rest
        study.enqueue_trial(best)
    res = run_search(cfg)
    same = sorted(t.number for t in res.study.trials if t.params == best)
    assert len(same) == 4  # three enqueued, one drawn
    v = search_view(res.study, cfg, top=10)
    rows = [x for x in v.leaders if x.label != "stagger"]
    keys = [schedule_key(x.alphas, x.base, x.window) for x in rows]
    assert len(keys) == len(set(keys))  # one row a schedule
    (row,) = [x for x in rows if x.label == f"t{same[0]:04d}"]
    assert row.same == tuple(f"t{n:04d}" for n in same[1:])
    assert row.name == f"t{same[0]:04d} (= " + ", ".join(row.same) + ")"
    fig = front_figure(v)
    (label,) = [
        t.get_text() for t in fig.axes[0].get_legend().get_texts() if "Pareto" in t.get_text()
    ]
    points = {tuple(x) for n, x in v.points if n in set(v.front)}
    assert label == f"Pareto front ({len(points)} point{'' if len(points) == 1 else 's'}, " + (
        f"{len(v.front)} trials)"
    )
    assert len(v.front) > len(points)  # the copies are on the front


def test_a_stopped_search_is_drawn_over_its_trials_and_continuing_is_said(finished, where):
    """After a stop the progress axis spans the trials run, not the trials asked; a launch that
    continues an existing study says how many it has and how many more it runs."""
    from fiblab.ui.search_view import progress_figure

    v = finished.view
    last = max(n for n, _ in v.points)
    fig = progress_figure(v, 400, running=False)
    assert fig.axes[0].get_xlim() == pytest.approx((-0.5, last + 0.5))
    assert progress_figure(v, 400).axes[0].get_xlim() == pytest.approx((-0.5, 399.5))
    note = SL.continuing("linear", ["distinct"], 0, None, where["runs"], 10)
    assert note.startswith("search 'linear-distinct-s0' exists with 6 finished trials")
    assert "to 10 in all (4 more)" in note
    assert SL.continuing("linear", ["distinct"], 1, None, where["runs"], 10) is None  # new


def test_a_new_search_shows_nothing_of_the_last_one_and_says_what_its_first_trial_costs(
    finished, where
):
    """A browser walk launched a second search from a panel that had shown a finished one: the
    leaders and the figures of the first stayed on screen under the new name, and the wait was
    promised "within seconds" for a probe objective, which trains a model per trial."""
    import dataclasses

    p = SearchPanel(objectives=("distinct",), trials=6, layers=4, auto_refresh=False, **where)
    p.attach(finished.handle.name)
    assert p.leaders.value and p.progress_image.layout.display != "none"
    assert "show 6 completed trials" in p.drawn.value
    row = next(r for r in p.runlist.rows if r.name == finished.handle.name)
    assert row.detail.startswith(f"{p.snap.done} / {p.snap.total} trials")  # the panel's own
    p.view = None  # a new study with no trial finished yet
    p._render(SL.SearchState("next", "starting", 0, 20))
    assert p.leaders.value == "" and p.drawn.value == ""
    shown = (p.progress_image, p.front_image, p.alpha_image)
    assert all(im.layout.display == "none" for im in shown)
    assert p.best.value.endswith("the first result shows here within seconds")
    p.handle = dataclasses.replace(p.handle, objectives=["probe"])
    p._render(SL.SearchState("next", "running", 0, 20))
    assert "each trial first trains a model for probe" in p.best.value
