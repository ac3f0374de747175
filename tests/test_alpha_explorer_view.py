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
    assert ex.sentence.startswith("3 of 3 runs stay within 0.1 of their init")


def test_counts_of_one_read_as_english(store):
    ex = AlphaExplorer(store, runs=[LM], render=False)
    assert ex.summary().startswith("1 run: 0 of 1 run stays within 0.05 of its init")
    labels = [label for label, _ in ex.runs.options]
    assert any(f"{LM}  [lm] · 4 layers" in label for label in labels)
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
