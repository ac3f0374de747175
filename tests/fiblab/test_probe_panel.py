"""Notebook 02's panel over grids it did not start (a kernel restart's view): grids written by
hand — grid.json, progress.json, results.jsonl, live files, as `fiblab probe --live` leaves them
— with a dead process (stopped) or a stand-in that lives (running).  The panel lists them,
attach fills the form with the grid's settings, a stopped grid shows no ETA and can be resumed,
a running one shows its live step, α and accuracy and an ETA computed by hand here."""

import html
import json
import os
import subprocess
import sys
import time

import pytest

from fiblab.jobs import probe_launch as PL
from fiblab.ui.probe_view import fmt_duration, status_html
from fiblab.ui.probes import ProbePanel
from probes.gridspec import GridSpec
from probes.live import LiveSpec, write_progress
from probes.settings import KEY_LEGEND


def _record(key, cell, steps):
    return {
        "key": key,
        "mechanism": cell.mechanism,
        "depth": cell.depth,
        "init": cell.init,
        "seed": cell.seed,
        "task": cell.task,
        "distance": cell.distance,
        "steps": steps,
        "alphas": [0.6, 1.4][: cell.depth],
        "acc": {"5": 1.0, "13": 0.5},
        "seconds": 12.0,
        "trajectory": [
            {"step": 0, "alphas": [0.55, 1.45][: cell.depth]},
            {"step": steps, "alphas": [0.6, 1.4][: cell.depth]},
        ],
        "loss": [{"step": 0, "loss": 3.0}],
        "settings": {},
    }


def _grid(runs, name, spec, pid, finished=0, progress=None):
    folder = runs / PL.GRIDS_DIR / name
    folder.mkdir(parents=True)
    cells, settings = spec.cells(), spec.settings()
    h = PL.GridHandle(
        name=name,
        grid_dir=str(folder),
        runs_dir=str(runs),
        store="",
        pid=pid,
        command=["python", "-m", "fiblab.cli", "probe"],
        spec=spec.to_dict(),
        keys=spec.keys(),
        depths=[c.depth for c in cells],
        steps=settings.steps,
        started=time.time(),
    )
    (folder / PL.META_NAME).write_text(json.dumps(h.to_json()))
    with open(folder / PL.RESULTS_NAME, "w") as f:
        for cell, key in list(zip(cells, h.keys))[:finished]:
            f.write(json.dumps(_record(key, cell, settings.steps)) + "\n")
    if progress is not None:
        write_progress(str(folder), pid=pid, keys=h.keys, **progress)
    return h


@pytest.fixture
def dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def alive_pid():
    """A process that lives and whose command line names fiblab.cli, as a grid process does."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "fiblab.cli"])
    yield p.pid
    p.kill()
    p.wait()


SHIFT = GridSpec(
    task="shift",
    scale="tiny",
    mechanisms=("blur", "dense"),
    depths=(2, 4),
    inits=("uniform",),
    seeds=(3,),
    distances=(5, 13),
    steps=40,
    precision="fp32",
    jobs=2,
)


def test_a_stopped_grid_is_listed_attach_fills_the_form_and_shows_no_eta(tmp_path, dead_pid):
    n = len(SHIFT.cells())
    assert n == 8  # 2 mechanisms × 2 depths × 2 trained distances
    _grid(
        tmp_path,
        "my-shift",
        SHIFT,
        dead_pid,
        finished=1,
        progress={"exit": "stopped", "message": f"stopped by request: 1 of {n} cells finished"},
    )
    p = ProbePanel(runs=str(tmp_path), store="", auto_refresh=False, render=False)
    assert (p.task.value, p.scale.value) == ("marked", "quick")  # the form's own defaults
    assert [(r.kind, r.name, r.state, r.detail) for r in p.runlist.rows] == [
        ("probe grid", "my-shift", "stopped", f"1 of {n} cells done")
    ]
    row = p.runlist.table.children[0]
    row.children[1].click()  # attach
    assert p.runlist.error is None and p.error is None
    assert p.spec() == SHIFT  # every setting back in the form
    assert (p.distances.value, p.seeds.value, p.depths.value) == ("5, 13", "3", "2, 4")
    assert p.name.value == "my-shift" and p.state == "stopped"
    assert f"{n} cells × 40 steps" in p.plan.value and "my-shift" in p.plan.value
    assert "left" not in p.status.value and "stopped by request" in p.status.value
    assert f"resume trains the {n - 1} unfinished cells" in p.status.value
    assert not p.resume_button.disabled and not p.launch_button.disabled
    assert p.stop_button.disabled and p.stop_button.button_style == ""  # not orange when off
    assert "1 finished cell)" in p.acc_table.value  # "1 finished cell", not "1 cells"
    assert SHIFT.keys()[0] in p.acc_table.value
    assert "cell names" in p.legend.value and html.escape(KEY_LEGEND) in p.legend.value
    assert p.progress.value == 40 and p.progress.max == n * 40
    # other settings are another grid: the attached grid's name is not reused for them
    p.seeds.value = "3, 4"
    assert p.name.value == "" and p.grid_name() == "shift-tiny"


def test_a_running_grid_shows_live_values_and_an_eta_from_step_times(tmp_path, alive_pid):
    spec = GridSpec(
        scale="tiny",
        mechanisms=("learned",),
        depths=(2, 4),
        inits=("staggered",),
        seeds=(0,),
        steps=100,
    )
    h = _grid(tmp_path, "live-one", spec, alive_pid)
    p = ProbePanel(runs=str(tmp_path), store="", auto_refresh=False, render=True)
    p.attach("live-one")
    # alive, no progress file yet: the process is still loading
    assert p.state == "starting" and "starting the process" in p.progress_label.value
    assert "left" not in p.status.value

    write_progress(h.grid_dir, pid=alive_pid, keys=h.keys, started=time.time())
    cell = spec.cells()[0]
    lc = LiveSpec(h.grid_dir).open(cell, h.keys[0], 100)
    p.refresh()
    assert p.state == "running" and "taking its first step" in p.progress_label.value
    from lab.kernels.cpu import is_cached  # the compile note only while the kernel is unbuilt

    assert ("compiling the attention kernel" in p.progress_label.value) is (not is_cached())
    assert "ETA after a few steps" in p.status.value
    traj = [{"step": 0, "alphas": [0.55, 1.45]}, {"step": 25, "alphas": [0.56, 1.44]}]
    lc.accuracy(50, {"5": 0.75, "13": 0.25})
    lc.step(50, 1.234, [0.57, 1.43], traj, [{"step": 0, "loss": 3.0}])
    d = json.load(open(lc.path))
    d["step_s"] = 0.1  # measured: 0.1 s a step at depth 2
    with open(lc.path, "w") as f:
        json.dump(d, f)
    s = p.refresh()
    # by hand: 0.05 s per layer-step; (100 − 50)·2 + 100·4 (the depth-4 cell) = 500 → 25 s
    assert s.eta_s == pytest.approx(25.0)
    assert "about 25s left" in p.status.value and "0 of 2 cells done" in p.status.value
    assert "step 50 / 100" in p.progress_label.value
    assert p.progress.value == 50 and p.progress.max == 200
    assert h.keys[0] in p.live.value and "1.234" in p.live.value
    assert "@5 0.75" in p.live.value and "0.570–1.430" in p.live.value
    assert p.image.value[:4] == b"\x89PNG" and p.image.layout.display is None  # partial record
    assert "cell names" in p.legend.value
    assert not p.stop_button.disabled and p.stop_button.button_style == "warning"
    assert p.launch_button.disabled and p.resume_button.disabled
    p.stop_button.click()
    assert p.state == "stopping" and os.path.exists(os.path.join(h.grid_dir, "STOP"))
    assert "left" not in p.status.value  # no ETA while stopping


def test_two_running_shift_cells_name_their_trained_distance(tmp_path, alive_pid):
    """Issue 42 item 1: two shift cells that differ only by their trained distance read
    alike in the live line unless it names the distance."""
    spec = GridSpec(
        task="shift",
        scale="tiny",
        mechanisms=("blur",),
        depths=(2,),
        inits=("uniform",),
        seeds=(0,),
        distances=(5, 13),
        steps=40,
        precision="fp32",
    )
    h = _grid(tmp_path, "two-shift", spec, alive_pid)
    write_progress(h.grid_dir, pid=alive_pid, keys=h.keys, started=time.time())
    cells = spec.cells()
    assert [c.distance for c in cells] == [5, 13]
    traj = [{"step": 0, "alphas": [0.55, 1.45]}]
    for cell, key in zip(cells, h.keys):
        LiveSpec(h.grid_dir).open(cell, key, 40).step(7, 1.0, [0.55, 1.45], traj, [])
    p = ProbePanel(runs=str(tmp_path), store="", auto_refresh=False, render=False)
    p.attach("two-shift")
    assert p.state == "running"
    parts = html.unescape(p.progress_label.value).split("; ")
    assert sorted(parts) == [
        "blur depth 2 uniform seed 0 distance 13: step 7 / 40",
        "blur depth 2 uniform seed 0 distance 5: step 7 / 40",
    ]


def test_a_failed_grid_shows_the_log_and_durations_read_as_words(tmp_path, dead_pid):
    h = _grid(tmp_path, "broken", GridSpec(scale="tiny", depths=(2,), seeds=(0,)), dead_pid)
    with open(h.log_path, "w") as f:
        f.write("Traceback (most recent call last):\nValueError: something broke\n")
    s = PL.snapshot(h)
    assert s.state == "failed" and "something broke" in s.message
    p = ProbePanel(runs=str(tmp_path), store="", auto_refresh=False, render=False)
    p.attach("broken")
    assert "something broke" in p.log.value and not p.resume_button.disabled
    assert "0 of 2 cells done" in status_html(s)
    assert [fmt_duration(x) for x in (42, 185, 7620, float("nan"))] == [
        "42s",
        "3m05s",
        "2h07m",
        "",
    ]


def test_notebook_03s_panel_lists_the_grid_too_and_points_to_notebook_02(tmp_path, dead_pid):
    from fiblab.ui.train import TrainPanel

    _grid(tmp_path, "my-shift", SHIFT, dead_pid, finished=1, progress={"exit": "stopped"})
    t = TrainPanel(runs=str(tmp_path), store="", auto_refresh=False, render=False, gpus=0)
    assert [(r.kind, r.name, r.state) for r in t.runlist.rows] == [
        ("probe grid", "my-shift", "stopped")
    ]
    _, attach, stop, resume = t.runlist.table.children[0].children
    assert attach.disabled and "notebook 02" in attach.tooltip
    assert stop.disabled and not resume.disabled


def test_the_list_row_follows_the_watched_grid_between_list_refreshes(tmp_path, alive_pid):
    """The fifth browser walk: the list at the top still read "running · 0 of 4 cells done"
    while the status line below said "4 of 4 cells done".  The watched grid's row now comes
    from the same snapshot as the status line (a hand count: cells finished = lines written)."""
    spec = GridSpec(scale="tiny", mechanisms=("learned",), depths=(2, 4), inits=("staggered",),
                    seeds=(0, 1), steps=100)  # fmt: skip
    h = _grid(tmp_path, "follow", spec, alive_pid)
    write_progress(h.grid_dir, pid=alive_pid, keys=h.keys, started=time.time())
    p = ProbePanel(runs=str(tmp_path), store="", auto_refresh=False, render=True)
    p.attach("follow")
    (row,) = p.runlist.rows
    assert (row.state, row.detail.split(" ·")[0]) == ("running", "0 of 4 cells done")
    cells, settings = spec.cells(), spec.settings()
    with open(os.path.join(h.grid_dir, PL.RESULTS_NAME), "a") as f:
        for cell, key in list(zip(cells, h.keys))[:3]:
            f.write(json.dumps(_record(key, cell, settings.steps)) + "\n")
    p.refresh()
    (row,) = p.runlist.rows
    assert row.detail.split(" ·")[0] == "3 of 4 cells done" == f"{p.snap.done} of 4 cells done"
    assert "3 of 4 cells done" in p.runlist.table.children[0].children[0].value
