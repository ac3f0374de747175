"""Notebook 03's panel after a kernel restart, and the honesty of what it says (issue 14, items 2,
5, 6, 8): a run launched by one panel is listed by a fresh panel (and by a fresh Python
process), attaching fills the form with that run's settings; stop → stopped with no ETA, resume
clears the stopped message; the ETA model against a hand computation on a fake store; a
finished run's name is refused with a next step that works; a weeks-long CPU run needs a
second click."""

import json
import math
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from fiblab.jobs import launch as LA
from fiblab.jobs import train_estimate as TE
from fiblab.jobs.train_eta import estimate, evals_left, format_duration
from fiblab.ui.train import TrainPanel
from lab.data.prepared import prepare
from lab.store import Store
from lab.training.phases import EXITING, TRAINING, write_phase
from lab.training.trainconfig import make_config

ENV = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
LONG = "eval_every=0\nckpt_every=100000\nlog_every=1\neval_batch=64"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A runs folder whose data cache holds the embedded corpus at the tiny preset's vocab."""
    shared = tmp_path_factory.getbasetemp() / "fiblab-tiny-data"
    prepare("bible", vocab_size=512, cache_dir=str(shared))  # a no-op once cached
    d = tmp_path_factory.mktemp("recovery")
    os.symlink(shared, d / "data")
    yield d
    for h in LA.list_runs(str(d)):  # a failed test leaves no training process behind
        LA.terminate(h, timeout=5)


def _panel(runs, **kw):
    kw.setdefault("preset", "cpu-stagger")  # another preset than the run's: attach must fill it
    return TrainPanel(
        store=str(runs / "store.db"), runs=str(runs), auto_refresh=False, env=ENV, gpus=0, **kw
    )


def _until(cond, what, timeout=180.0, poll=0.2):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(poll)


def _row(panel, name):
    (i,) = [i for i, r in enumerate(panel.runlist.rows) if r.name == name]
    label, attach, stop, resume = panel.runlist.table.children[i].children
    return panel.runlist.rows[i], attach, stop, resume


FRESH_KERNEL = """
import json, sys
from fiblab.ui.train import TrainPanel
p = TrainPanel(preset="cpu-fixed", store=sys.argv[1], runs=sys.argv[2], auto_refresh=False,
               gpus=0)
rows = [(r.name, r.state) for r in p.runlist.rows]
p.attach(sys.argv[3])
print(json.dumps({"rows": rows, "preset": p.preset.value, "steps": p.steps.value,
                  "name": p.name.value, "overrides": p.overrides.value, "state": p.state}))
"""


def test_a_fresh_panel_lists_attaches_stops_and_resumes_a_run(runs):
    first = _panel(runs, preset="tiny", steps=100_000, name="rec", overrides=LONG)
    assert first.launch(anyway=True) is not None and first.handle.name == "rec"  # hours long
    _until(lambda: first.refresh()["step"] >= 1, "the run logging a step")

    # the kernel-restart stand-in, as a new Python process: it lists the run and attaches it
    out = subprocess.run(
        [sys.executable, "-c", FRESH_KERNEL, str(runs / "store.db"), str(runs), "rec"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **ENV},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["rows"] == [["rec", "running"]]
    assert (seen["preset"], seen["steps"], seen["name"]) == ("tiny", 100_000, "rec")
    assert seen["overrides"].splitlines() == LONG.splitlines() and seen["state"] == "running"

    # ... and a new panel in this process: the list's attach button fills the form
    fresh = _panel(runs)
    assert (fresh.preset.value, fresh.name.value, fresh.steps.value) == ("cpu-stagger", "", 0)
    row, attach, stop, resume = _row(fresh, "rec")
    assert row.state == "running" and not attach.disabled and resume.disabled
    attach.click()
    assert fresh.error is None and fresh.runlist.error is None
    assert fresh.handle.name == "rec" and fresh.state == "running"
    assert (fresh.preset.value, fresh.steps.value, fresh.name.value) == ("tiny", 100_000, "rec")
    assert fresh.data.value == "bible" and fresh.overrides.value.splitlines() == LONG.splitlines()
    assert "running" in fresh.status.value and "step" in fresh.status.value
    assert fresh.image.layout.display != "none" and fresh.image.value[:4] == b"\x89PNG"
    assert fresh.attach("rec") is None  # nothing noisy for a notebook to print
    assert fresh.stop_button.button_style == "warning" and not fresh.stop_button.disabled

    # launching the form as it stands would not start a second run under that name
    fresh.launch_button.click()
    assert "still running" in fresh.error and "stop it first" in fresh.error

    # stop → stopped, with no ETA; the stop button disabled and grey
    fresh.stop_button.click()
    # a tiny run stops within the click's own refresh on a fast machine: either word is right,
    # never "failed" (test_a_run_that_stops_between_the_two_reads_is_never_failed)
    assert fresh.state in ("stopping", "stopped") and "ETA" not in fresh.stats.value
    assert LA.wait(fresh.handle, timeout=120) == "stopped"
    s = fresh.refresh()
    assert s["state"] == "stopped" and math.isnan(s["eta_s"]) and "ETA" not in fresh.stats.value
    assert "stopped by request" in fresh.status.value
    assert fresh.stop_button.disabled and fresh.stop_button.button_style == ""
    assert not fresh.resume_button.disabled

    # the name is refused with what works (resume is live now), then resume clears the message
    fresh.launch_button.click()
    assert "press resume to continue" in fresh.error and "another run name" in fresh.error
    fresh.resume_button.click()
    assert fresh.error is None, fresh.error
    assert fresh.state in ("starting", "running") and "stopped by request" not in fresh.status.value
    assert fresh.snap["message"] == "" and "ETA 0" not in fresh.stats.value
    _until(lambda: fresh.refresh()["state"] == "running", "the resumed run training")
    LA.terminate(fresh.handle)


def test_a_finished_runs_name_is_refused_with_a_next_step_that_works(runs):
    p = _panel(runs, preset="tiny", steps=3, name="fin", overrides=LONG)
    p.launch()
    assert p.wait(timeout=180) == "done", p.handle.log_tail()
    assert p.resume_button.disabled and p.stop_button.disabled
    assert "ETA" not in p.stats.value
    p.launch_button.click()
    assert "has finished (step 3 of 3)" in p.error and "another run name" in p.error
    assert "resume" not in p.error  # resume is disabled for a finished run: not the advice
    assert LA.snapshot(p.handle)["eta_s"] == 0.0


@pytest.mark.parametrize(
    "overrides, says",
    [
        ("steps=-3", "steps=-3 must be a positive integer"),
        ("lr=0", "lr=0.0 must be a learning rate > 0"),
        ("log_every=0", "log_every=0 must be a positive integer"),
        ("model.window=abc", "window must be an integer"),
    ],
)
def test_a_bad_override_is_refused_before_launch_and_nothing_is_listed(tmp_path, overrides, says):
    """A value the form can refuse never becomes a process that fails at once and is listed
    as "failed · step 0 / -3" with an enabled resume (the browser walk of notebook 03)."""
    p = TrainPanel(store="", runs=str(tmp_path), auto_refresh=False, env=ENV, gpus=0,
                   preset="tiny", name="doomed", overrides=overrides)  # fmt: skip
    p.launch_button.click()
    assert p.error is not None and says in p.error and p.handle is None
    assert "\n" not in p.error.strip()  # one line
    assert p.error.count(overrides) == 1  # the value named once ("steps=-3: steps=-3 …" before)
    assert os.listdir(tmp_path) == [] and p.runlist.rows == []


def test_an_override_that_contradicts_the_steps_box_is_refused_not_ignored(tmp_path):
    """The fourth browser walk: with the steps box at 8, ``steps=-3`` was neither checked nor
    used (the box won silently) and the run trained 8 steps."""
    p = TrainPanel(store="", runs=str(tmp_path), auto_refresh=False, env=ENV, gpus=0,
                   preset="tiny", name="twice", steps=8, overrides="steps=-3")  # fmt: skip
    p.launch_button.click()
    assert p.error is not None and "steps is given twice" in p.error and p.handle is None
    assert "steps=8" in p.error and "steps=-3" in p.error
    assert os.listdir(tmp_path) == [] and p.runlist.rows == []


# --------------------------------------------------------------------------------------------
# the ETA model
# --------------------------------------------------------------------------------------------
def test_evals_left_counts_the_multiples_below_the_last_step():
    for step, steps, every in [(0, 12, 6), (5, 300, 100), (100, 300, 100), (299, 300, 100)]:
        brute = len([s for s in range(step + 1, steps) if s % every == 0])
        assert evals_left(step, steps, every) == brute
    assert [evals_left(0, 12, 6), evals_left(5, 300, 100), evals_left(7, 300, 0)] == [1, 2, 0]


def _fake_run(tmp_path, status, resumed=True):
    """A store with run 'fake': a first process (ten minutes ago) trained steps 10–40 and was
    stopped, a second one resumed at step 40 and logged 50–70, then wrote ``status``; a `sleep`
    stands in for the live process.  ``resumed=False``: the second one died before it reached
    the store, and ``status`` is the first one's."""
    store = str(tmp_path / "store.db")
    then = (datetime.now(timezone.utc) - timedelta(minutes=10)).isoformat()
    with Store(store) as st:
        st.start_run("fake", {"steps": 100}, kind="lm", at=then)
        st.log_event("fake", "start", "step 0", at=then)
        for step, rate in [(10, 500), (20, 1000), (30, 1000), (40, 1000)]:  # first process
            st.log_metrics("fake", step, {"loss": 5.0, "tokens_per_s": rate})
        st.log_metrics("fake", 20, {"eval_s": 4.0})
        st.log_metrics("fake", 40, {"eval_s": 6.0})
        st.set_status("fake", "stopped" if resumed else status, at=then)
        mark = st.last_event_id()  # the second launch: what its handle notes
        if resumed:
            st.start_run("fake", {"steps": 100}, kind="lm", resume=True)
            st.log_event("fake", "resume", "step 40")
            for step, rate in [(50, 100), (60, 2000), (70, 4000)]:  # 50 holds the kernel build
                st.log_metrics("fake", step, {"loss": 4.0, "tokens_per_s": rate})
            st.log_metrics("fake", 60, {"eval_s": 3.0})
            st.set_status("fake", status)
    run_dir = tmp_path / "fake"
    proc = subprocess.Popen(["sleep", "60"])
    h = LA.RunHandle(
        name="fake",
        preset="tiny",
        run_dir=str(run_dir),
        runs_dir=str(tmp_path),
        store=store,
        pid=proc.pid,
        command=["sleep"],
        steps=100,
        tokens_per_step=1000,
        learned=False,
        started=time.time() - 1,
        proc=proc,
        events_before=mark,
    )
    run_dir.mkdir()  # as the launcher makes it (a phase goes only into an existing folder)
    write_phase(str(run_dir), TRAINING, start_step=40, eval_every=20)
    write_phase(str(run_dir), TRAINING, light_eval_tokens=2000, full_eval_tokens=5000)
    return h, proc


def test_the_eta_counts_evaluations_and_only_this_processs_speed(tmp_path):
    h, proc = _fake_run(tmp_path, "running")
    try:
        s = LA.snapshot(h)
    finally:
        proc.kill()
        proc.wait()
    # by hand: this process's rates after its first interval are 2000 and 4000 tokens/s: 1000-
    # token steps of 0.5 and 0.25 s, 0.375 s on average; 30 steps left = 11.25 s; light
    # evaluations left at step 80 only (100 is the final one) = 1 × its measured 3.0 s; the
    # final one scores 5000 tokens, 2.5 × the light one's 2000 = 7.5 s.  The first process's
    # speed (1000 tokens/s) is ignored.
    assert s["state"] == "running" and s["step"] == 70 and s["phase"] == TRAINING
    e = s["eta"]
    assert e.step_s == pytest.approx(0.375) and e.steps_left == 30 and e.evals_left == 1
    assert e.eval_s == pytest.approx(3.0) and e.final_s == pytest.approx(7.5) and e.evals_timed
    assert s["eta_s"] == pytest.approx(11.25 + 3.0 + 7.5)
    assert "ETA 22s (30 steps + 1 evaluation + the final evaluation)" == e.text()


def test_no_eta_for_a_stopped_run_and_none_before_the_new_process_logs(tmp_path):
    h, proc = _fake_run(tmp_path, "stopped")
    proc.kill()
    proc.wait()
    h.proc = None  # as a fresh kernel sees it: a PID that is gone, no exit code
    s = LA.snapshot(h)
    assert s["state"] == "stopped" and math.isnan(s["eta_s"]) and s["phase"] == ""
    assert s["tokens_per_s"] > 0 and s["step"] == 70  # the rates are there: still no ETA
    # right after a resume from step 70: nothing measured yet by the new process, so no guess
    # from the old one's speed
    e = estimate(70, 100, 70, [(60, 2000), (70, 4000)], [(60, 3.0)], tokens_per_step=1000,
                 eval_every=20, light_tokens=2000, full_tokens=5000)  # fmt: skip
    assert not e.known and "first logged step" in e.text()


def test_before_any_evaluation_is_timed_it_is_a_labelled_forward_pass_guess():
    e = estimate(10, 100, 0, [(5, 1000), (10, 2000)], [], tokens_per_step=1000, eval_every=50,
                 light_tokens=3000, full_tokens=6000)  # fmt: skip
    # 0.5 s a step; a light evaluation of 3000 tokens at a third of a training token's cost:
    # 3 × 0.5 / 3 = 0.5 s; the final one 2 × that
    assert e.step_s == 0.5 and e.eval_s == pytest.approx(0.5) and e.final_s == pytest.approx(1.0)
    assert e.seconds == pytest.approx(90 * 0.5 + 1 * 0.5 + 1.0) and not e.evals_timed
    assert "guessed" in e.text()
    assert [format_duration(x) for x in (9.6, 250, 7500, 3 * 86400 + 4 * 3600)] == [
        "10s", "4m10s", "2h05m", "3d04h",
    ]  # fmt: skip


# --------------------------------------------------------------------------------------------
# the form: processes, the stop button, a weeks-long run on a CPU
# --------------------------------------------------------------------------------------------
def test_processes_box_says_what_happens_on_a_cpu(tmp_path):
    cpu = TrainPanel(preset="tiny", store="", runs=str(tmp_path), auto_refresh=False, gpus=0)
    assert cpu.nproc.layout.display == "none" and cpu.nproc_note.layout.display != "none"
    assert "no GPU" in cpu.nproc_note.value
    gpu = TrainPanel(preset="tiny", store="", runs=str(tmp_path), auto_refresh=False, gpus=2)
    assert gpu.nproc.layout.display != "none" and gpu.nproc_note.layout.display == "none"
    assert "2 here" in gpu.nproc.description
    assert cpu.stop_button.disabled and cpu.stop_button.button_style == ""  # not orange
    assert "no run" in cpu.runlist.title.value and not os.listdir(tmp_path)


def test_training_flops_per_token_match_the_models_parameters():
    from lab.lm.model import FibLM
    from lab.lm.modelconfig import config_for

    cfg = config_for("cpu-small", attention="dense")
    n = FibLM(cfg).num_params(non_embedding=True)  # the blocks' weights (+ small norm gains)
    T, d, V = cfg.seq_len, cfg.d_model, cfg.vocab_size
    attn = 4 * cfg.head_dim * cfg.n_heads * (T + 1) / 2 * cfg.n_layers  # (T+1)/2 keys a query
    by_hand = 3 * (2 * n + 2 * d * V + attn)
    assert TE.train_flops_per_token(cfg) == pytest.approx(by_hand, rel=0.01)


def test_a_weeks_long_cpu_run_asks_for_a_second_click(tmp_path, monkeypatch):
    store = str(tmp_path / "store.db")
    ref = make_config("cpu-stagger")
    with Store(store) as st:  # this machine trained cpu-stagger at 10,000 tokens/s
        st.start_run("cpu-stagger", ref.to_dict(), kind="lm")
        for step in (10, 20, 30):
            st.log_metrics("cpu-stagger", step, {"tokens_per_s": 10_000.0})
    paper = make_config("fib-stagger-w12")
    want = (
        paper.steps
        * paper.tokens_per_step
        * TE.train_flops_per_token(paper.model)
        / (TE.train_flops_per_token(ref.model) * 10_000.0)
    )
    assert want > 7 * 86400  # weeks, as the issue says
    started = []
    monkeypatch.setattr(LA, "launch", lambda *a, **k: started.append(k) or 1 / 0)
    p = TrainPanel(
        preset="fib-stagger-w12", store=store, runs=str(tmp_path), auto_refresh=False, gpus=0
    )
    p.launch_button.click()
    assert started == [] and p.error is None
    assert format_duration(want) in p.warning and "launch anyway" in p.warning
    assert "cpu-stagger" in p.warning and "10,000 tokens/s" in p.warning
    assert p.launch_button.description == "launch anyway" and p.warning_box.value
    p.steps.value = 20  # a change of the form withdraws the question ...
    assert p.warning is None and p.launch_button.description == "launch"
    p.steps.value = 0
    p.launch_button.click()  # ... so it is asked again
    assert started == [] and p.launch_button.description == "launch anyway"
    p.launch_button.click()  # the second click starts it
    assert len(started) == 1 and "ZeroDivisionError" in p.error
    # a GPU machine is not asked
    g = TrainPanel(
        preset="fib-stagger-w12", store=store, runs=str(tmp_path), auto_refresh=False, gpus=1
    )
    g.launch_button.click()
    assert len(started) == 2 and g.warning is None


def test_training_so_far_counts_from_the_first_start_not_the_last_evaluation(tmp_path):
    """Issue 42 item 4: "training (1m36s so far)" read "(12s so far)" after a mid-run
    evaluation, since the process rewrites the phase's start when it trains again."""
    import re

    from lab.training.phases import EVALUATING

    h, proc = _fake_run(tmp_path, "running")
    h.started = time.time() - 300  # the process started 5 min ago
    phase_file = os.path.join(h.run_dir, "phase.json")

    first = []

    def phase(name, ago):  # as write_phase leaves it, with the start set back by hand
        write_phase(h.run_dir, name)
        d = json.load(open(phase_file))
        if name == TRAINING and not first:  # the run's first training: its start moves too
            first.append(d["training_since"] - ago)
            d["training_since"] = first[0]
        d["since"] = time.time() - ago
        with open(phase_file, "w") as f:
            json.dump(d, f)

    def so_far(p):
        m = re.search(r"training \((?:(\d+)m)?(\d+)s so far\)", p.status.value)
        assert m, p.status.value
        return 60 * int(m.group(1) or 0) + int(m.group(2))

    p = TrainPanel(store=h.store, runs=str(tmp_path), auto_refresh=False, gpus=0, render=False)
    try:
        phase(TRAINING, 96)
        p.handle = h
        p.refresh()
        assert p.state == "running" and 96 <= so_far(p) < 110
        phase(f"{EVALUATING} at step 60", 20)
        p.refresh()
        assert re.search(r"evaluating at step 60 \(2\ds so far\)", p.status.value)
        phase(TRAINING, 12)  # training again after the evaluation
        p.refresh()
        assert 96 <= so_far(p) < 110  # not 12s
        # a panel attached only now (another tab, a restarted kernel) never saw the first
        # start: the phase file's training_since says it
        fresh = TrainPanel(store=h.store, runs=str(tmp_path), auto_refresh=False, gpus=0,
                           render=False)  # fmt: skip
        fresh.handle = h
        fresh.refresh()
        assert 96 <= so_far(fresh) < 110
    finally:
        proc.kill()
        proc.wait()


def test_a_run_that_stops_between_the_two_reads_is_never_failed(tmp_path, monkeypatch):
    """The race behind a flaky "failed == stopping": the view read the store's row ("running"),
    the process then wrote "stopped" and exited, and only then was its liveness checked —
    dead with a running row reads "failed".  Scripted: the process exits the moment its row is
    read.  Liveness must be read first, so the row is never older than it."""
    h, proc = _fake_run(tmp_path, "running")
    exited = []
    real_row = LA._store_row

    def row_then_exit(handle, st):
        r = real_row(handle, st)
        exited.append(True)  # the process writes its status and exits right after this read
        return r

    monkeypatch.setattr(LA, "_store_row", row_then_exit)
    monkeypatch.setattr(type(h), "is_alive", lambda self: not exited)
    try:
        assert LA.snapshot(h)["state"] == "running"  # alive when looked at, then its row
        exited.clear()
        (tmp_path / "fake" / LA.STOP_FILE).write_text("")
        assert LA.snapshot(h)["state"] == "stopping"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("status, want", [("done", "done"), ("stopped", "stopping")])
def test_a_process_shutting_down_after_its_loop_reads_how_it_ended(tmp_path, status, want):
    """After its loop a run's process lives on for seconds (closing the store, tearing down
    CUDA), its STOP already consumed; its phase says "exiting".  The view reads the end the
    store holds — "done", or "stopping" for a stopped run — never "starting" again."""
    h, proc = _fake_run(tmp_path, status)
    try:
        write_phase(h.run_dir, EXITING)
        assert LA.state(h) == want and LA.snapshot(h)["state"] == want
    finally:
        proc.kill()
        proc.wait()


def test_a_resume_that_dies_before_reaching_the_store_reads_failed_not_stopped(tmp_path):
    """The store still holds the last launch's "stopped" when a resume's process dies before
    it writes (a corrupt checkpoint, a missing data file): its exit code says it failed, and
    the view must say so with its log — not "stopped" again, as if resume had done nothing."""
    h, proc = _fake_run(tmp_path, "stopped", resumed=False)
    proc.kill()
    proc.wait()  # this launch's own process, ended by an error
    (tmp_path / "fake" / LA.LOG_NAME).write_text("RuntimeError: checkpoint is corrupt\n")
    s = LA.snapshot(h)
    assert s["state"] == "failed" and "checkpoint is corrupt" in s["message"]
