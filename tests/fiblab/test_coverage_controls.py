"""The coverage explorer's controls say what they compute (issue 14, item 8): choosing "custom"
keeps the schedule's exact α (L=8, K=25 stays 75, where α rounded to 4 digits gives 74), moving a
slider off a named schedule shows "custom" and reset goes back to it, and the K box is disabled,
with the reason beside it, for the bases that do not use it.  Counts are checked against the
paper's numbers and a brute-force set union."""

import pytest

from fiblab.ui.coverage import CoverageExplorer
from lab.ladder.offsets import Ladder
from lab.ladder.plan import attended_distances
from lab.ladder.schedules import layer_alphas


def union(alphas, rungs=15, base="fib", seq_len=1024, window=8):
    """Independent count: the size of the union of every layer's attended distances."""
    out = set()
    for a in alphas:
        out |= set(attended_distances(a, seq_len, Ladder(window, base=base, rungs=rungs)))
    return len(out)


@pytest.fixture
def ex():
    return CoverageExplorer(render=False)


def test_the_papers_numbers(ex):
    ex.schedule.value = "fixed"
    assert ex.result["union"] == 19
    ex.schedule.value = "coprime"
    assert ex.result["union"] == 133
    ex.schedule.value = "stagger"
    assert ex.result["union"] == 133
    ex.base.value = "pow2"
    assert ex.result["union"] == 101
    ex.base.value = "fib"
    ex.layers.value = 8
    ex.rungs.value = 25
    assert ex.result["union"] == 75 == union(layer_alphas("stagger", 8), rungs=25)


def test_choosing_custom_keeps_the_exact_values(ex):
    ex.layers.value, ex.rungs.value = 8, 25
    exact = layer_alphas("stagger", 8)
    rounded = [float(f"{a:.4g}") for a in exact]
    assert union(rounded, rungs=25) == 74  # what the 4-digit text box used to compute
    ex.schedule.value = "custom"
    assert ex.alphas == exact and ex.result["union"] == 75
    assert ex.custom_alphas.value == "0.5, 0.6429, 0.7857, 0.9286, 1.071, 1.214, 1.357, 1.5"
    assert not ex.custom_alphas.disabled and ex.error is None
    ex.reset_to_schedule()  # custom: the list in the box, still exact
    assert ex.alphas == exact and ex.result["union"] == 75
    ex.layers.value = 9  # custom: kept (exactly) and padded with α = 1
    assert ex.alphas == exact + [1.0]
    assert ex.result["union"] == union(exact + [1.0], rungs=25)


def test_typing_the_list_uses_the_typed_numbers(ex):
    ex.layers.value, ex.rungs.value = 8, 25
    ex.schedule.value = "custom"
    typed = "0.5, 0.6429, 0.7857, 0.9286, 1.072, 1.214, 1.357, 1.5"  # one digit edited
    ex.custom_alphas.value = typed
    want = [float(t) for t in typed.split(", ")]
    assert ex.alphas == want and ex.result["union"] == union(want, rungs=25)


def test_moving_a_slider_shows_custom_and_reset_goes_back(ex):
    ex.layers.value, ex.rungs.value = 8, 25
    assert ex.schedule.value == "stagger"
    ex.sliders[2].value = 0.9
    want = layer_alphas("stagger", 8)
    want[2] = 0.9
    assert ex.schedule.value == "custom"
    assert [float(t) for t in ex.custom_alphas.value.split(",")][2] == 0.9  # the box follows
    assert ex.alphas == want and ex.result["union"] == union(want, rungs=25) != 75
    ex.sliders[5].value = 1.0  # a second move: still custom, the box follows again
    want[5] = 1.0
    assert ex.schedule.value == "custom" and ex.alphas == want
    assert [float(t) for t in ex.custom_alphas.value.split(",")][5] == 1.0
    ex.reset.click()  # "reset to schedule": the schedule the sliders were moved off
    assert ex.schedule.value == "stagger" and ex.custom_alphas.disabled
    assert ex.alphas == layer_alphas("stagger", 8) and ex.result["union"] == 75
    ex.schedule.value = "fixed"
    ex.set_alpha(0, 1.5)
    assert ex.schedule.value == "custom"
    ex.reset_to_schedule()
    assert ex.schedule.value == "fixed" and ex.result["union"] == 19


def test_a_slider_move_keeps_a_typed_list_for_reset(ex):
    ex.layers.value = 4
    ex.schedule.value = "custom"
    ex.custom_alphas.value = "0.5, 0.8, 1.2, 1.5"
    ex.sliders[1].value = 1.0
    assert ex.schedule.value == "custom" and ex.custom_alphas.value == "0.5, 0.8, 1.2, 1.5"
    assert ex.alphas == [0.5, 1.0, 1.2, 1.5]
    ex.reset_to_schedule()
    assert ex.alphas == [0.5, 0.8, 1.2, 1.5] and ex.schedule.value == "custom"


def test_reset_with_the_custom_box_empty_goes_back_to_the_last_named_schedule(ex):
    """The fifth browser walk: "custom" chosen, the box cleared (after a refused list), then
    reset set every layer to α = 1 — a schedule nobody chose.  Reset goes back to the last
    named schedule instead, its union counted by brute force."""
    ex.schedule.value = "coprime"
    ex.schedule.value = "custom"
    ex.custom_alphas.value = "1.2, abc"
    assert "'abc' is not a number" in ex.error
    ex.custom_alphas.value = ""
    ex.reset.click()
    assert ex.schedule.value == "coprime" and ex.error is None and ex.custom_alphas.disabled
    assert ex.alphas == layer_alphas("coprime", 16) != [1.0] * 16
    assert ex.result["union"] == union(layer_alphas("coprime", 16)) == 133


def test_one_recompute_per_slider_move(ex):
    n = ex.updates
    ex.sliders[3].value = 1.23
    assert ex.updates == n + 1 and ex.schedule.value == "custom"


def test_the_k_box_is_disabled_where_k_is_not_used(ex):
    assert not ex.rungs.disabled and ex.rungs_note.value == ""
    assert ex.rungs_note.layout.display == "none"
    ex.base.value = "pow2"
    assert ex.rungs.disabled and ex.rungs_note.layout.display is None
    note = ex.rungs_note.value
    assert "K not used" in note and "power-of-2" in note and "10 rungs" in note  # 1, 2, …, 512
    assert "fib-rungs-note" in ex.rungs_note._dom_classes
    before = ex.result["union"]
    ex.rungs.value = 25  # from code it still changes, and nothing moves: K is not used
    assert ex.result["union"] == before == 101
    ex.seq_len.value = 2048  # 1, 2, …, 1024: eleven rungs
    assert "11 rungs" in ex.rungs_note.value
    ex.base.value = "custom"
    assert ex.rungs.disabled and "custom base" in ex.rungs_note.value
    ex.base.value = "fib"
    assert not ex.rungs.disabled and ex.rungs_note.value == ""
    assert ex.result["union"] == union(layer_alphas("stagger", 16), rungs=25, seq_len=2048)


def test_one_layer_reads_as_english():
    ex = CoverageExplorer(layers=1, render=False)
    assert "after 1 layer:" in ex.band_label.value and "layers" not in ex.band_label.value
    ex.set_alpha(0, 1.0)
    with pytest.raises(ValueError, match=r"the explorer has 1 layer \(0\.\.0\)"):
        ex.set_alpha(3, 1.0)
