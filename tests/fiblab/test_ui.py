"""Widget wiring: setting a widget value changes the computed outputs as the probes compute them;
bad input is shown in the UI state (ipywidgets would swallow an exception), never raised."""

import html
import itertools
import os

import numpy as np
import pytest

from fiblab.ui.coverage import CoverageExplorer
from fiblab.ui.coverage_explore import explore, heatmap, log_bins
from lab.ladder.offsets import Ladder
from lab.ladder.plan import attended_distances
from lab.ladder.schedules import layer_alphas
from probes.coverage import coverage


def union_of(alphas, window=8, seq_len=1024, base="fib", rungs=15, rounding="round"):
    """Independent count: the set union of every layer's attended distances."""
    out = set()
    for a in alphas:
        out |= set(
            attended_distances(
                a, seq_len, Ladder(window, base=base, rungs=rungs, rounding=rounding)
            )
        )
    return len(out), len([d for d in out if d > window])


def reach_brute(sets, seq_len):
    """Reachable share after each layer by explicit sums (small sizes only)."""
    cur, out = {0}, []
    for s in sets:
        cur = {c + d for c, d in itertools.product(cur, s) if c + d < seq_len}
        out.append(len(cur) / seq_len)
    return out


@pytest.fixture
def ex():
    return CoverageExplorer(render=False)


# ----------------------------------------------------------------------------- coverage explorer
def test_defaults_are_the_papers_numbers(ex):
    assert len(ex.sliders) == 16 and ex.alphas == layer_alphas("stagger", 16)
    assert (ex.result["union"], ex.result["union_beyond_window"]) == (133, 124)
    assert ">133<" in ex.union_label.value and "124 beyond W=8" in ex.union_label.value
    assert "fib-union" in ex.union_label._dom_classes
    ex.schedule.value = "fixed"
    assert ex.alphas == [1.0] * 16 and ex.result["union"] == 19
    assert ex.result["union_beyond_window"] == 10
    ex.rounding.value = "floor"
    ex.schedule.value = "stagger"
    assert ex.result["union"] == 139  # README: floor 139, ceil 138
    ex.rounding.value = "ceil"
    assert ex.result["union"] == 138


def test_moving_one_slider_changes_the_union_and_reset_restores(ex):
    before = ex.result["union"]
    n = ex.updates
    ex.sliders[3].value = 1.23  # as a user drags it
    assert ex.updates == n + 1  # exactly one recompute
    want = layer_alphas("stagger", 16)
    want[3] = 1.23
    assert ex.alphas == want
    direct = coverage(want, 1024, Ladder(8))
    assert ex.result["union"] == direct["union"] == union_of(want)[0] != before
    assert f">{direct['union']}<" in ex.union_label.value
    assert ex.result["per_layer_sets"][3] == attended_distances(1.23, 1024, Ladder(8))
    ex.reset.click()
    assert ex.alphas == layer_alphas("stagger", 16) and ex.result["union"] == before
    assert ex.error is None


def test_settings_flow_into_the_count(ex):
    ex.window.value = 12
    ex.seq_len.value = 2048
    ex.rungs.value = 17
    a = layer_alphas("stagger", 16)
    assert (ex.result["union"], ex.result["union_beyond_window"]) == union_of(a, 12, 2048, rungs=17)
    assert ex.result["convention"]["band"] == 12
    ex.base.value = "pow2"
    ex.window.value = 8
    ex.seq_len.value = 1024
    assert ex.result["union"] == 101  # README: pow2 stagger 101
    ex.schedule.value = "fixed"
    assert ex.result["union"] == 15  # pow2 fixed 15


def test_layers_and_the_papers_19_to_75(ex):
    ex.layers.value = 8
    assert len(ex.sliders) == 8 and len(ex.slider_box.children) == 8
    assert ex.alphas == layer_alphas("stagger", 8)
    ex.rungs.value = 25
    assert ex.result["union"] == 75  # SPEC §9: "19 → about 75"
    ex.schedule.value = "fixed"
    assert ex.result["union"] == 19
    ex.schedule.value = "coprime"
    assert ex.alphas == layer_alphas("coprime", 8) != layer_alphas("stagger", 8)
    assert ex.result["union"] == 75  # the same values, permuted
    ex.schedule.value = "learned-init"
    assert min(ex.alphas) == pytest.approx(0.55) and max(ex.alphas) == pytest.approx(1.45)


def test_custom_alphas_and_custom_base(ex):
    ex.layers.value = 4
    ex.schedule.value = "custom"
    assert not ex.custom_alphas.disabled
    assert ex.custom_alphas.value  # prefilled with the current α
    ex.custom_alphas.value = "0.5, 0.8, 1.2, 1.5"
    assert ex.alphas == [0.5, 0.8, 1.2, 1.5]
    ex.base.value = "custom"
    ex.custom_base.value = "1, 3, 9, 27, 81, 243"
    assert ex.base_value() == (1, 3, 9, 27, 81, 243)
    assert (ex.result["union"], ex.result["union_beyond_window"]) == union_of(
        [0.5, 0.8, 1.2, 1.5], base=[1, 3, 9, 27, 81, 243]
    )
    ex.sliders[0].value = 1.0
    ex.layers.value = 6  # custom: kept, padded with α = 1
    assert ex.alphas == [1.0, 0.8, 1.2, 1.5, 1.0, 1.0]
    ex.reset_to_schedule()  # custom: back to the typed list
    assert ex.alphas == [1.0, 0.8, 1.2, 1.5, 1.0, 1.0]


@pytest.mark.parametrize(
    "widget, value, needle",
    [
        ("custom_base", "1, x, 9", "'x' is not a number"),
        ("custom_base", "1, 3, 3", "duplicate"),
        ("custom_base", "1, -2", "positive"),
        ("custom_alphas", "0.7, 0.9", "2 values but the model has 16 layers"),
        ("custom_alphas", "0.7, " * 15 + "2.5", "alpha=2.5 at layer 15"),
    ],
)
def test_bad_input_is_shown_not_raised(ex, widget, value, needle):
    ex.base.value = "custom" if widget == "custom_base" else "fib"
    if widget == "custom_alphas":
        ex.schedule.value = "custom"
    good = ex.result["union"]
    getattr(ex, widget).value = value  # must not raise
    assert ex.error is not None and needle in ex.error
    assert html.escape(ex.error) in ex.error_box.value and "fib-error" in ex.error_box._dom_classes
    assert ex.result["union"] == good  # the last good outputs stay
    getattr(ex, widget).value = "1, 3, 9" if widget == "custom_base" else ", ".join(["1.0"] * 16)
    assert ex.error is None and ex.error_box.value == ""


def test_a_refused_custom_alpha_stays_said_until_it_is_fixed(ex):
    """A browser walk typed 0.4 into the custom α box: refused, but the next change (K) cleared
    the error while the box still read 0.4 beside counts of the sliders' α. The error now
    stays beside every update until the box holds a list in use."""
    ex.layers.value = 4
    ex.schedule.value = "custom"
    ex.custom_alphas.value = "0.5, 0.8, 1.2, 1.5"
    ex.custom_alphas.value = "0.4, 0.8, 1.2, 1.5"  # below the α range
    assert ex.error is not None and "0.4" in ex.error
    before = ex.updates
    ex.rungs.value = 10  # another control: the counts update for the α in use
    assert ex.updates == before + 1
    assert ex.alphas == [0.5, 0.8, 1.2, 1.5]
    assert "not applied: the counts are for the α in use (0.5, 0.8, 1.2, 1.5)" in ex.error
    ex.custom_alphas.value = "0.6, 0.8, 1.2, 1.5"
    assert ex.error is None and ex.alphas == [0.6, 0.8, 1.2, 1.5]


def test_clearing_the_custom_alpha_box_clears_its_error(ex):
    """Issue 42 item 3: "1.2, abc" + Enter, then an emptied box + Enter still read "'abc' is
    not a number"; and the example in that error was the custom base's (1, 3, 9), not α's."""
    ex.layers.value = 4
    ex.schedule.value = "custom"
    ex.custom_alphas.value = "0.5, 0.8, 1.2, 1.5"
    ex.custom_alphas.value = "1.2, abc"
    assert ex.error is not None and "'abc' is not a number" in ex.error
    assert "e.g. 0.5, 1, 1.5" in ex.error and "1, 3, 9" not in ex.error
    ex.custom_alphas.value = ""  # cleared + Enter
    assert ex.error is None and ex.error_box.value == ""
    assert ex.alphas == [0.5, 0.8, 1.2, 1.5]  # the sliders keep the α in use
    ex.rungs.value = 10  # and the next update does not bring the error back
    assert ex.error is None
    ex.base.value = "custom"
    ex.custom_base.value = "1, x, 9"  # the custom base keeps its own (offset) example
    assert "e.g. 1, 3, 9" in ex.error
    ex.custom_alphas.value = "0.5, 0.8, 1.2, 1.5"
    ex.custom_alphas.value = ""  # clearing α does not hide the base's error
    assert ex.error is not None and "'x' is not a number" in ex.error


def test_longer_length_rungs_and_heatmap(ex):
    rep = ex.result
    new2, new4 = rep["new_at"][2], rep["new_at"][4]
    # docs/attention.md: at 4096 the stagger's layers 9–15 gain one never-trained rung each (987·α)
    assert new4[9:] == [[1086], [1151], [1217], [1283], [1349], [1415], [1480]]
    assert new4[:9] == [[]] * 9 and new2 == new4  # K=15 ends at 987: nothing more
    ex.rungs.value = 16  # 1597 joins at 4T for small α
    a = layer_alphas("stagger", 16)
    for ell in (0, 15):
        extra = sorted(
            set(attended_distances(a[ell], 4096, Ladder(8, rungs=16)))
            - set(attended_distances(a[ell], 1024, Ladder(8, rungs=16)))
        )
        assert ex.result["new_at"][4][ell] == extra
    edges, counts = ex.result["heatmap"]
    sets = ex.result["per_layer_sets"]
    assert counts.shape == (16, len(edges) - 1)
    assert counts.sum(axis=1).tolist() == [len(s) - 1 for s in sets]  # all but δ = 0
    b = np.searchsorted(edges, sets[15][-1], side="right") - 1
    assert counts[15, b] >= 1 and edges[b] <= sets[15][-1] < edges[b + 1]


def test_log_bins_cover_every_distance():
    e = log_bins(4096)
    assert e[0] == 1 and e[-1] == 4096 and (np.diff(e) >= 1).all()
    _, counts = heatmap([list(range(4096))], 4096)
    assert counts.sum() == 4095


def test_reachable_share_matches_explicit_sums():
    rep = explore([0.5, 1.0, 1.5], window=2, seq_len=64, rungs=8)
    assert rep["reachable"] == pytest.approx(reach_brute(rep["per_layer_sets"], 64))
    assert rep["reachable"] == sorted(rep["reachable"])


def test_update_is_fast_at_L16_T4096():
    ex = CoverageExplorer(layers=16, seq_len=4096)  # with the figure
    ex.set_alpha(5, 0.9)
    ex.set_alpha(5, 1.3)
    assert ex.result["convention"]["seq_len"] == 4096 and len(ex.image.value) > 1000
    assert ex.image.value[:4] == b"\x89PNG"
    assert ex.last_update_cpu_s < 1.0, ex.last_update_cpu_s
    with pytest.raises(ValueError, match="out of range"):
        ex.set_alpha(16, 1.0)


# ----------------------------------------------------------------------------- probe panel
def test_probe_panel_precision_menu_says_what_auto_picks(tmp_path, cpu_profile):
    """The menu's default reads "auto (fp32 on this CPU)" on either CPU, and the cells are
    keyed by what auto resolved to; a chosen bf16 keys them "/bf16"."""
    from fiblab.ui.probes import ProbePanel

    p = ProbePanel(scale="tiny", store="", out_dir=str(tmp_path), render=False)
    assert p.precision.value == "auto"
    assert p.precision.options[0] == ("auto (fp32 on this CPU)", "auto")
    assert [v for _, v in p.precision.options] == ["auto", "fp32", "bf16"]
    assert p.cells()[0].key(p.settings()).endswith("/w2")
    p.precision.value = "bf16"
    assert p.cells()[0].key(p.settings()).endswith("/w2/bf16")


def test_probe_panel_maps_widgets_to_the_grid(tmp_path):
    from fiblab.ui.probes import ProbePanel
    from probes.settings import SCALES

    p = ProbePanel(
        scale="quick",
        mechanisms=("blur", "dense"),
        depths=(2, 4),
        seeds=(0, 1),
        store="",
        out_dir=str(tmp_path),
        render=False,
    )
    cells = p.cells()
    assert len(cells) == 2 * 2 * 2 + 2 * 2  # dense ignores the init
    assert p.settings() == SCALES["quick"] and not p.paper_settings()
    assert "12 cells × 400 steps" in p.plan.value
    p.scale.value = "paper"
    assert p.paper_settings() and "paper's settings" in p.plan.value
    p.precision.value = "bf16"  # the paper's own probe precision
    assert p.settings().precision == "bf16" and p.paper_settings()
    assert all(c.key(p.settings()).endswith("/bf16") for c in p.cells())
    p.precision.value = "fp32"
    p.distances.value = "100, 300"
    assert p.settings().task.distances == (100, 300) and not p.paper_settings()
    p.task.value = "shift"
    assert p.distances.value == "89, 233, 350"
    assert {c.distance for c in p.cells()} == {89, 233, 350}
    p.distances.value = "5000"
    assert p.error and "1..1023" in p.error
    p.depths.value = "two"
    assert "'two' is not a number" in p.error
    p.depths.value = "2"
    p.distances.value = "89"
    assert p.error is None
    p.mechanisms.value = ()
    assert "no mechanism" in p.error


def test_probe_panel_runs_a_tiny_grid(tmp_path):
    from fiblab.ui.probes import ProbePanel
    from lab.store import Store

    p = ProbePanel(
        scale="tiny",
        mechanisms=("learned",),
        depths=(2,),
        inits=("staggered",),
        seeds=(0,),
        steps=4,
        store=str(tmp_path / "s.db"),
        out_dir=str(tmp_path),
    )
    p.launch_button.click()  # a separate process (fiblab.jobs.probe_launch); the kernel is free
    assert p.error is None and p.handle is not None
    assert p.wait(timeout=300) == "done"
    assert p.error is None and len(p.records) == 1
    assert p.progress.value == p.progress.max == 4 and p.progress_steps == 4
    rec = p.records[0]
    assert rec["steps"] == 4 and set(rec["acc"]) == {"5", "13"}
    assert "@13" in p.acc_table.value and "Table-2 layout" in p.table2.value
    assert p.image.value[:4] == b"\x89PNG"
    with Store(tmp_path / "s.db") as st:
        assert st.probes()["run"].unique().tolist() == [rec["key"]]
    p.run()  # resumable: nothing retrained
    assert "0 trained now, 1 from the results file" in p.progress_label.value


# ----------------------------------------------------------------------------- train panel
def test_train_panel_errors_are_shown(tmp_path):
    from fiblab.ui.train import TrainPanel, preset_options

    assert preset_options()[0].startswith("cpu-") and "fib-stagger-w12" in preset_options()
    p = TrainPanel(preset="tiny", store="", runs=str(tmp_path), auto_refresh=False)
    p.overrides.value = "lr 3"
    p.launch_button.click()
    assert p.handle is None and "key=value" in p.error and "key=value" in p.error_box.value
    p.overrides.value = "nope=1"
    p.launch_button.click()
    assert "names no training field" in p.error
    p.stop_button.click()
    assert "no run to stop" in p.error
    assert not os.listdir(tmp_path)  # nothing was started


def test_train_panel_buttons_follow_the_run(tmp_path):
    """Stop writes the request and the view says 'stopping'; resume is refused while the
    process lives; after it exits (no store: nothing recorded) the run reads 'failed' and
    resume becomes available.  A `sleep` process stands in for the training run."""
    import subprocess

    from fiblab.jobs import launch as LA
    from fiblab.ui.train import TrainPanel
    from lab.training.stop import STOP_FILE

    p = TrainPanel(preset="tiny", store="", runs=str(tmp_path), auto_refresh=False)
    assert p.state == "idle" and p.stop_button.disabled
    proc = subprocess.Popen(["sleep", "60"])
    try:
        p.handle = LA.RunHandle(
            name="fake",
            preset="tiny",
            run_dir=str(tmp_path / "fake"),
            runs_dir=str(tmp_path),
            store="",
            pid=proc.pid,
            command=["sleep"],
            steps=10,
            tokens_per_step=512,
            learned=True,
            spec={"preset": "tiny"},
            proc=proc,
        )
        p.refresh_button.click()
        assert p.state == "starting" and not p.stop_button.disabled
        assert p.launch_button.disabled and p.resume_button.disabled
        p.stop_button.click()
        assert p.error is None and (tmp_path / "fake" / STOP_FILE).exists()
        assert p.state == "stopping" and "stopping" in p.status.value
        p.resume_button.click()
        assert "still running" in p.error
    finally:
        proc.kill()
        proc.wait()
    p.refresh()
    assert p.state == "failed" and not p.resume_button.disabled and p.stop_button.disabled
    assert "fib-run-status" in p.status._dom_classes and "failed" in p.status.value


def test_the_explorer_says_what_it_did_and_what_it_counts(ex):
    """Issue 28 item 7 (notebook 01): a change of L in custom mode says what it padded or cut;
    'round' says half-to-even; a union of one distance is singular, and when no rung lands
    beyond the window the empty heatmap is explained (brute force: {0} for α = 0.5, K = 1)."""
    ex.layers.value = 4
    ex.schedule.value = "custom"
    ex.custom_alphas.value = "0.5, 0.8, 1.2, 1.5"
    ex.layers.value = 6
    assert "layers 5–6 added with α = 1" in ex.layers_note.value
    ex.layers.value = 3
    assert "the α of layers 4–6 dropped (1.5, 1, 1)" in ex.layers_note.value
    assert ex.alphas == [0.5, 0.8, 1.2]
    ex.schedule.value = "fixed"
    ex.layers.value = 5
    assert ex.layers_note.value == ""  # a named schedule is recomputed, nothing to say
    assert dict((v, k) for k, v in ex.rounding.options)["round"] == "round (half to even)"
    from lab.ladder.plan import attended_distances

    assert attended_distances(0.5, 64, Ladder(0, base="fib", rungs=1, rounding="round")) == [
        0
    ]  # 0.5 → 0, half to even
    ex.layers.value = 1
    ex.schedule.value = "custom"
    ex.custom_alphas.value = "0.5"
    ex.window.value = 0
    ex.rungs.value = 1
    ex.seq_len.value = 64
    assert ex.result["union"] == 1
    assert "1</span> distinct distance</b>" in ex.union_label.value
    assert "fib-no-rungs" in ex.union_label.value and "heatmap is empty" in ex.union_label.value
    ex.custom_alphas.value = "1.0"
    assert "fib-no-rungs" not in ex.union_label.value


def test_train_panels_run_list_row_agrees_with_its_status_line(tmp_path, monkeypatch):
    """Issue 28 item 6 (a browser walk saw the list at step 782 beside the status line's
    1027): between the list's refreshes, the watched run's row is drawn from the panel's own
    snapshot. The snapshot is the real one of a stand-in process, its step moved by hand."""
    import subprocess

    from fiblab.jobs import launch as LA
    from fiblab.ui.runlist import RunRow
    from fiblab.ui.train import TrainPanel

    class Listed:  # what the list would re-read from disk: always the stale step 3
        kind = "LM run"

        def rows(self):
            return [RunRow("LM run", "fake", "running", "step 3 / 10")]

    real, step = LA.snapshot, {"n": 3}

    def snapshot(h):
        return {**real(h), "state": "running", "step": step["n"]}

    monkeypatch.setattr(LA, "snapshot", snapshot)
    p = TrainPanel(preset="tiny", store="", runs=str(tmp_path), auto_refresh=False)
    p.runlist.sources = [Listed()]
    proc = subprocess.Popen(["sleep", "60"])
    try:
        p.handle = LA.RunHandle(
            name="fake", preset="tiny", run_dir=str(tmp_path / "fake"), runs_dir=str(tmp_path),
            store="", pid=proc.pid, command=["sleep"], steps=10, tokens_per_step=512,
            learned=False, spec={"preset": "tiny"}, proc=proc,
        )  # fmt: skip
        p.refresh()  # idle → running: the whole list is read
        for n in (5, 8):
            step["n"] = n
            p.refresh()
            (row,) = p.runlist.rows
            assert f"step {n} / 10" in row.detail and f"step {n}/10" in p.status.value
            assert f"step {n} / 10" in p.runlist.table.children[0].children[0].value
    finally:
        proc.kill()
        proc.wait()
