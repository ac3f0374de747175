"""Notebook 04's α explorer tells the reader what it shows (issue 14, item 8): a hint under the
run list says how to pick several runs, the caption counts the plotted runs and α lines (one per
run and layer: counted by hand from the fixture store), and the tolerance slider sits on its own
row.  The fixture store: smoke-learned-s0 (an LM run, 4 layers) and two marked probes (2 layers)."""

import pytest
from fixture_store import smoke_store

from fiblab.ui.alphas import RUNS_HINT, AlphaExplorer, inert_sentence, line_count

LM = "smoke-learned-s0"
UNIFORM = "marked/blur/d2/uniform/s0/n40"
STAGGERED = "marked/blur/d2/staggered/s0/n40"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return smoke_store(str(tmp_path_factory.mktemp("alphas") / "store.db"))


def _caption_numbers(ex):
    import re

    m = re.search(r"data-lines='(\d+)' data-runs='(\d+)'", ex.caption.value)
    return (int(m.group(1)), int(m.group(2))) if m else None


def test_the_caption_counts_runs_and_lines(store):
    ex = AlphaExplorer(store, render=False)
    assert set(ex.selected) == {LM, UNIFORM, STAGGERED}
    assert ex.lines == 4 + 2 + 2 and _caption_numbers(ex) == (8, 3)
    assert "plotted: 3 runs, 8 α lines" in ex.caption.value
    assert "fib-alpha-caption" in ex.caption._dom_classes
    ex.runs.value = (LM,)  # a plain click: that run alone
    assert ex.lines == 4 and _caption_numbers(ex) == (4, 1)
    assert "plotted: 1 run, 4 α lines" in ex.caption.value
    ex.runs.value = (UNIFORM, STAGGERED)
    assert ex.lines == 4 and _caption_numbers(ex) == (4, 2)
    ex.runs.value = ()
    assert ex.lines == 0 and ex.caption.value == ""


def test_the_caption_follows_what_is_drawn(store):
    ex = AlphaExplorer(store, runs=[UNIFORM])  # rendering: the figure has this run only
    assert ex.figure is not None and ex.lines == 2
    assert "plotted: 1 run, 2 α lines" in ex.caption.value
    assert ex.image.layout.display is None


def test_line_count_ignores_missing_alpha_and_other_runs():
    import pandas as pd

    traj = pd.DataFrame(
        {
            "run": ["a", "a", "a", "a", "b", "b", "c"],
            "step": [0, 1, 0, 1, 0, 0, 0],
            "layer": [0, 0, 1, 1, 0, 1, 0],
            "alpha": [1.0, 1.1, 0.9, 0.8, 1.0, float("nan"), 1.0],
        }
    )
    assert line_count(traj, ["a"]) == 2
    assert line_count(traj, ["a", "b"]) == 3  # b's layer 1 never logged an α
    assert line_count(traj, ["b", "c"]) == 2
    assert line_count(traj, []) == 0


def test_the_multi_select_hint_is_shown(store):
    ex = AlphaExplorer(store, render=False)
    assert "Ctrl" in RUNS_HINT and "Shift" in RUNS_HINT and "⌘" in RUNS_HINT
    assert RUNS_HINT in ex.runs_hint.value and "fib-runs-hint" in ex.runs_hint._dom_classes
    assert ex.runs_hint in ex.widget.children  # right under the run list
    assert ex.widget.children.index(ex.runs_hint) == 1


def test_the_tolerance_slider_has_its_own_row(store):
    ex = AlphaExplorer(store, render=False)
    assert ex.tolerance in ex.widget.children  # not squeezed beside the run list
    assert ex.tolerance.layout.min_width == ex.tolerance.layout.width == "480px"
    assert "fib-tolerance" in ex.tolerance._dom_classes
    ex.tolerance.value = 0.1
    assert ex.sentence.startswith("3 of 3 learned-α runs stay within 0.1 of their init")


def test_counts_of_one_read_as_english(store):
    ex = AlphaExplorer(store, runs=[LM], render=False)
    assert ex.summary().startswith("1 run: 0 of 1 learned-α run stays within 0.05 of its init")
    labels = [label for label, _ in ex.runs.options]
    assert any(f"{LM}  [lm] · 4 layers" in label for label in labels)
    # the step is the last α logged (a stopped run's last step may be one later)
    assert all(" · α to step " in label for label in labels)
    import pandas as pd

    one = pd.DataFrame(
        {
            "run": ["x", "y"],
            "inert": [True, None],
            "max_drift": [0.01, None],
            "worst_layer": [0, None],
        }
    )
    s = inert_sentence(one, 0.05)
    assert s.startswith("1 of 1 run stays within 0.05 of its init")
    assert s.endswith("; 1 run without a known initial α not counted")


def test_the_results_panel_shows_the_same_hint(store):
    from fiblab.ui.results import ResultsPanel

    panel = ResultsPanel(store, paper_db="", render=False)
    assert RUNS_HINT in panel.runs_hint.value
    assert panel.widget.children.index(panel.runs_hint) == 1  # right under the run list


def test_layers_can_be_picked_and_the_caption_names_them(store):
    ex = AlphaExplorer(store, runs=[LM], render=False)
    assert [v for _, v in ex.layers.options] == [0, 1, 2, 3] and ex.layers.value == (0, 1, 2, 3)
    ex.layers.value = (1, 3)
    assert ex.lines == 2 and "layers 1, 3" in ex.caption.value
    ex.runs.value = (UNIFORM,)  # 2 layers: the choice that exists is kept
    assert ex.layers.value == (1,) and ex.lines == 1


def _drift_traj(move):
    import pandas as pd

    rows = []
    for layer in range(4):
        for step in range(0, 101, 10):
            rows.append(
                {
                    "run": "r",
                    "step": step,
                    "layer": layer,
                    "alpha": 1.0 + move * (layer + 1) * step / 100,
                    "alpha_init": 1.0,
                }
            )
    return pd.DataFrame(rows)


def test_a_small_drift_is_resolved_on_its_own_axis():
    """Four layers drifting 0.002–0.008 (issue 28: four overlapping flat lines on the α axis,
    which keeps a 0.2 span): on the drift axis their ends are distinct and the scale is stated."""
    from analysis.figures import plots

    traj = _drift_traj(0.002)
    fig = plots.alpha_trajectories(traj, drift=True)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    ends = sorted(
        line.get_ydata()[-1] for line in ax.get_lines() if line.get_label().startswith("layer")
    )
    assert ends == pytest.approx([0.002, 0.004, 0.006, 0.008])
    assert hi - lo < 0.02  # the axis fits the drift (the α view's is ≥ 0.2)
    assert "α − α_init" in ax.get_ylabel() and "axis" in ax.get_ylabel()
    px = (ends[1] - ends[0]) / (hi - lo) * ax.bbox.height  # neighbouring lines, in pixels
    assert px > 10
    alpha = plots.alpha_trajectories(traj).axes[0]
    a_lo, a_hi = alpha.get_ylim()
    assert (ends[1] - ends[0]) / (a_hi - a_lo) * alpha.bbox.height < 3  # what the user saw
    one = plots.alpha_trajectories(traj, layers=[2], drift=True).axes[0]
    assert [ln.get_label() for ln in one.get_lines() if ln.get_label().startswith("layer")] == [
        "layer 2"
    ]
    with pytest.raises(ValueError, match="none of layers"):
        plots.alpha_trajectories(traj, layers=[9])


def test_auto_view_draws_the_drift_of_inert_runs(store):
    ex = AlphaExplorer(store, runs=[LM], render=False)
    assert ex.view.value == "auto"
    inert = bool(ex.drift["max_drift"].max() < ex.tolerance.value)
    assert ex.drift_view is inert and ("data-view='drift'" in ex.caption.value) is inert
    ex.view.value = "alpha"
    assert not ex.drift_view and "data-view='alpha'" in ex.caption.value
    ex.view.value = "drift"
    assert ex.drift_view and "largest |drift|" in ex.caption.value


def test_the_inert_count_leaves_out_fixed_alpha_runs(tmp_path):
    """Issue 42 item 2: fixed-α probe cells log their constant α too; counting them made "5 of
    6 runs stay within 0.05" read as support for the paper from runs whose α cannot move.  The
    fixture's learned runs: 2 of 3 within 0.05 (the LM run drifts 0.06); two fib-stagger cells
    (α 0.5 and 1.5 at every step) are added and must not be counted."""
    from lab.store import Store

    path = smoke_store(str(tmp_path / "store.db"))
    fixed = []
    with Store(path) as s:
        for seed in (0, 1):
            traj = [{"step": st, "alphas": [0.5, 1.5]} for st in range(0, 41, 10)]
            rec = {
                "task": "marked",
                "mechanism": "fib-stagger",
                "depth": 2,
                "init": "-",
                "seed": seed,
                "steps": 40,
                "acc": {200: 0.3},
                "alphas": [0.5, 1.5],
                "trajectory": traj,
            }
            fixed.append(s.log_probe(rec))
    ex = AlphaExplorer(path, render=False)
    assert set(ex.selected) == {LM, UNIFORM, STAGGERED, *fixed}
    assert ex.sentence.startswith("2 of 3 learned-α runs stay within 0.05 of their init")
    assert ex.sentence.endswith("; 2 fixed-α runs not counted (α that cannot move)")
    assert "2 of 3 learned-α runs" in ex.sentence_box.value
    assert list(ex.inert.set_index("run").loc[[LM, *fixed], "learned"]) == [True, False, False]
    ex.runs.value = tuple(fixed)  # none of the shown runs has learned α
    assert ex.sentence.startswith("none of the 2 shown runs has learned α")
    assert "nothing to check" in ex.sentence and " of 2 " not in ex.sentence
    ex.runs.value = (fixed[0],)
    assert ex.sentence.startswith("the shown run has no learned α")
