"""Launching a training run as a separate process: it finishes and lands in the store; a stop
request ends it cleanly with a resumable checkpoint; resuming reproduces the uninterrupted run."""

import os
import signal
import subprocess
import sys
import time

import pytest

from fiblab.jobs import launch as L
from fiblab.jobs import train_process as TP
from lab.data.prepared import prepare
from lab.lm.typedconfig import read_config
from lab.store import Store
from lab.training.checkpoint import list_checkpoints, load_checkpoint
from lab.training.stop import STOP_FILE
from lab.training.trainconfig import TrainConfig, make_config

# 80: the stop test sees step 1 and stops; the stop landed at step 3–5 loaded and 7 quiet on
# the Xeon (2026-12-05), so 20 left a faster CPU little room before the run ended "done"
STEPS = 80
# no periodic checkpoint or light eval: the stop's checkpoint is the only one mid-run
FAST = {"eval_every": 0, "ckpt_every": 1000, "log_every": 1, "eval_batch": 64}
FAST["betas"] = (0.85, 0.95)  # a tuple field reaches the process typed
ENV = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}  # CPU: bit-exact resume


def shared_corpus(tmp_path_factory):
    """The embedded corpus tokenised at the tiny preset's vocab, once per test session
    (tests/fiblab/test_notebooks.py reuses the same folder)."""
    d = tmp_path_factory.getbasetemp() / "fiblab-tiny-data"
    prepare("bible", vocab_size=512, cache_dir=str(d))  # a no-op once cached
    return d


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A runs folder whose data cache already holds the embedded corpus at the tiny vocab."""
    d = tmp_path_factory.mktemp("launch")
    os.symlink(shared_corpus(tmp_path_factory), d / "data")
    return d


def _launch(runs, name, **kw):
    return L.launch(
        "tiny",
        name=name,
        steps=kw.pop("steps", STEPS),
        overrides=FAST,
        store=str(runs / "store.db"),
        runs_dir=str(runs),
        env=ENV,
        nproc=1,
        **kw,
    )


def _losses(runs, name):
    with Store(runs / "store.db") as st:
        m = st.metrics(name, names=["loss"])
    return dict(zip(m["step"].tolist(), m["value"].tolist()))


def test_command_is_cli_or_torchrun():
    one = TP.train_command(
        "tiny",
        name="a",
        steps=5,
        overrides="lr=1e-3\nmodel.window=4",
        store="s.db",
        runs_dir="R",
        python="py",
    )
    assert one[:4] == ["py", "-m", "fiblab.cli", "train"]
    assert one[one.index("--override") + 1 :] == ["run_dir=R", "lr=1e-3", "model.window=4"]
    assert "--resume" not in one and one[one.index("--steps") + 1] == "5"
    two = TP.train_command("tiny", nproc=4, resume=True, python="py")
    assert (
        two[:7]
        == [
            "py",
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=4",
            "-m",
            "fiblab.cli",
        ]
        and two[-1] == "--resume"
    )
    # typed values are written as lab.lm.typedconfig reads them back
    typed = TP.train_command("tiny", overrides={"betas": (0.8, 0.9), "val_tokens": None})
    assert typed[typed.index("--override") + 1 :] == [
        f"run_dir={L.DEFAULT_RUNS}",
        "betas=0.8,0.9",
        "val_tokens=none",
    ]
    # what launch() runs: the config file it wrote, nothing re-serialised
    cfg = TP.train_command(
        config="R/a/launch-config.json", store="s.db", runs_dir=None, python="py"
    )
    assert cfg == ["py", "-m", "fiblab.cli", "train", "--config", "R/a/launch-config.json"] + [
        "--quiet",
        "--store",
        "s.db",
    ]
    with pytest.raises(ValueError, match="preset or a config"):
        TP.train_command("tiny", config="c.json")


def test_auto_nproc_uses_the_gpus_the_step_splits_over():
    assert [
        TP.auto_nproc(a, g) for a, g in [(3, 0), (4, 1), (4, 8), (2, 8), (8, 8), (6, 4), (32, 8)]
    ] == [1, 1, 4, 2, 8, 3, 8]


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"overrides": "lr 1e-3"}, "key=value"),
        ({"overrides": {"nope": 1}}, "names no training field"),
        ({"nproc": 0}, "nproc"),
        ({"nproc": 3}, "do not split over 3"),
        ({"overrides": {"run_dir": "elsewhere"}}, "override run_dir=elsewhere is the launch's"),
    ],
)
def test_bad_launch_fails_before_starting(tmp_path, kw, needle):
    with pytest.raises(ValueError, match=needle):
        L.launch("tiny", name="bad", store="", runs_dir=str(tmp_path), **kw)
    assert not (tmp_path / "bad").exists()  # nothing was started
    with pytest.raises(ValueError, match="unknown"):
        L.launch("no-such-preset", runs_dir=str(tmp_path))


KERNEL = """
import json, sys, time
from fiblab.jobs import launch as L
h = L.launch("tiny", name="straight", steps={steps}, overrides={fast!r}, store={store!r},
             runs_dir={runs!r}, env={env!r}, nproc=1)
print(h.pid, flush=True)
time.sleep(600)
"""


def _launch_from_a_doomed_kernel(runs):
    """Launch 'straight' from a stand-in kernel process, then SIGKILL the kernel's whole process
    group, as a kernel restart does (jupyter_client kills the group); returns the run's PID."""
    code = KERNEL.format(
        steps=STEPS, fast=FAST, store=str(runs / "store.db"), runs=str(runs), env=ENV
    )
    kernel = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        pid = int(kernel.stdout.readline())
    finally:
        os.killpg(kernel.pid, signal.SIGKILL)
        kernel.wait()
    return pid


def test_run_finishes_and_a_stopped_run_resumes_exactly(runs):
    pid = _launch_from_a_doomed_kernel(runs)
    stopped = _launch(runs, "stopped")  # both at once: two writers
    assert stopped.proc is not None and stopped.pid != os.getpid()
    assert os.getpgid(stopped.pid) == stopped.pid  # its own session
    with pytest.raises(ValueError, match="already running"):
        _launch(runs, "stopped")
    # the process trains the config built and checked here, handed over as a file
    assert stopped.command[3:5] == ["train", "--config"] and "--preset" not in stopped.command
    conf = stopped.command[5]
    assert conf == os.path.join(os.path.abspath(stopped.run_dir), "launch-config.json")
    want = make_config("tiny", {**FAST, "steps": STEPS, "name": "stopped", "run_dir": str(runs)})
    assert read_config(conf, TrainConfig) == want
    straight = L.attach("straight", str(runs))  # a new kernel finds it again
    assert straight.pid == pid and straight.proc is None
    assert straight.is_alive()  # the kernel's death spared it

    # stop the second run as soon as it has logged a step
    deadline = time.monotonic() + 120
    while L.snapshot(stopped)["step"] < 1:
        assert stopped.is_alive(), stopped.log_tail()
        assert time.monotonic() < deadline, "the run logged no steps in 120 s"
        time.sleep(0.05)
    L.request_stop(stopped)
    # at once "stopping", never "running" (read while the run serves the stop: test_runlist);
    # "stopped" if it had served it and exited before this read, on a busy machine
    assert L.state(stopped) in ("stopping", "stopped")
    assert L.wait(stopped, timeout=120) == "stopped", stopped.log_tail()
    assert stopped.proc.returncode == 0  # a clean exit
    snap = L.snapshot(stopped)
    k = snap["step"]
    assert 1 <= k < STEPS and snap["state"] == "stopped" and f"step {k}" in snap["message"]
    ckpts = list_checkpoints(stopped.run_dir)
    assert [os.path.basename(p) for p in ckpts] == [f"ckpt_{k:07d}.pt"]
    assert load_checkpoint(ckpts[0])["step"] == k  # complete, checksum good
    assert not os.path.exists(os.path.join(stopped.run_dir, STOP_FILE))  # request consumed
    with Store(runs / "store.db") as st:
        row = st.runs().set_index("name").loc["stopped"]
        assert row.status in ("stopped", "pending") and f"step {k}" in row.message
        assert "stopped" in st.events("stopped")["kind"].tolist()
        assert "recompute" not in set(st.evals("stopped")["kind"])  # no final eval yet

    # the uninterrupted run finished, and its rows are in the store
    assert L.wait(straight, timeout=180) == "done", straight.log_tail()
    done = L.snapshot(straight)
    assert done["step"] == STEPS and done["eta_s"] == 0.0 and done["tokens_per_s"] > 0
    assert not done["alphas"].empty and done["alphas"].shape[1] == 2  # learned, 2 layers
    trained = read_config(
        os.path.join(straight.run_dir, "config.json"), TrainConfig
    )  # as training wrote it
    assert trained == make_config(
        "tiny", {**FAST, "steps": STEPS, "name": "straight", "run_dir": str(runs)}
    )
    assert trained.betas == (0.85, 0.95)
    with Store(runs / "store.db") as st:
        assert st.runs().set_index("name").loc["straight"].status == "done"
        assert (st.evals("straight")["kind"] == "recompute").any()

    # resume: same name, continues from step k, and matches the straight run bit for bit
    with pytest.raises(ValueError, match="already has checkpoints"):
        _launch(runs, "stopped")
    again = L.resume(stopped)
    assert "--resume" in again.command and again.name == "stopped"
    assert (
        again.command[3:6] == ["train", "--config", conf] and read_config(conf, TrainConfig) == want
    )
    assert L.wait(again, timeout=180) == "done", again.log_tail()
    a, b = _losses(runs, "straight"), _losses(runs, "stopped")
    assert sorted(a) == list(range(1, STEPS + 1))
    assert a == b

    # a new session can attach to the run from its launch.json
    h = L.attach("stopped", str(runs))
    assert h.pid == again.pid and h.proc is None and L.state(h) == "done"


def test_a_resume_with_changed_settings_runs_with_them(runs):
    """ "Resume for more steps" must not resume the old plan: the changes reach the handle, the
    config file the process reads, its command and what it trains (the store's last step)."""
    first = L.launch(
        "tiny", name="more", steps=4, overrides={**FAST, "ckpt_every": 2},
        store=str(runs / "store.db"), runs_dir=str(runs), env=ENV, nproc=1,
    )  # fmt: skip
    assert L.wait(first, timeout=120) == "done", first.log_tail()
    more = L.resume(first, steps=7, overrides={**FAST, "ckpt_every": 2, "lr": 2e-3})
    assert more.steps == 7 and more.spec["steps"] == 7 and more.spec["overrides"]["lr"] == 2e-3
    conf = read_config(more.command[more.command.index("--config") + 1], TrainConfig)
    assert (conf.steps, conf.lr, conf.name) == (7, 2e-3, "more") and "--resume" in more.command
    assert L.wait(more, timeout=120) == "done", more.log_tail()
    assert sorted(_losses(runs, "more")) == list(range(1, 8))
    assert read_config(os.path.join(more.run_dir, "config.json"), TrainConfig).steps == 7
    # the environment and folder it was launched with go on with it, kept once (on the handle)
    assert more.env == first.env == ENV and more.cwd == first.cwd and "env" not in more.spec


def test_resume_takes_env_and_cwd_from_the_handle_or_an_older_spec(monkeypatch, tmp_path):
    """A resume restarts with the env and cwd of the launch: read from the handle, or from the
    spec of a launch.json written before the handle kept them; a change given wins over both."""
    seen = []
    monkeypatch.setattr(L, "launch", lambda preset, **kw: seen.append(kw))
    spec = {"preset": "tiny", "name": "r", "steps": 3, "overrides": {}, "runs_dir": str(tmp_path)}
    args = dict(name="r", preset="tiny", run_dir=str(tmp_path / "r"), runs_dir=str(tmp_path))
    args |= dict(store="", pid=-1, command=[], steps=3, tokens_per_step=1, learned=False)
    h = L.RunHandle(**args, spec=spec, env={"A": "1"}, cwd="/here")
    old = L.RunHandle(**args, spec={**spec, "env": {"A": "2"}, "cwd": "/there"})
    L.resume(h)
    L.resume(old)
    L.resume(h, env={"A": "3"})
    assert [(kw["env"], kw["cwd"]) for kw in seen] == [
        ({"A": "1"}, "/here"), ({"A": "2"}, "/there"), ({"A": "3"}, "/here"),
    ]  # fmt: skip
    assert all(kw["resume"] is True for kw in seen)
    # a launch.json of a version that dropped an override run_dir unseen resumes where it ran
    L.resume(L.RunHandle(**args, spec={**spec, "overrides": {"run_dir": "/else", "lr": 1e-3}}))
    assert seen[-1]["overrides"] == {"lr": 1e-3}


def test_failed_run_reports_why(runs):
    h = L.launch(
        "tiny",
        name="nodata",
        steps=2,
        data=str(runs / "missing.txt"),
        store=str(runs / "store.db"),
        runs_dir=str(runs),
        env=ENV,
        nproc=1,
    )
    assert L.wait(h, timeout=60) == "failed"
    snap = L.snapshot(h)
    assert h.proc.returncode != 0 and "missing.txt" in snap["message"]


def test_attach_unknown_run(tmp_path):
    with pytest.raises(ValueError, match="no launched run"):
        L.attach("ghost", str(tmp_path))


def test_progress_moves_between_logged_steps_and_a_stop_shows_its_own_step(runs):
    """The store hears of a step every ``log_every`` steps; the live view must still move every
    few seconds (the process's heartbeat), and a stopped run shows the step it stopped at —
    the same number as its message (issue 28: "step 40/60" beside "stopped at step 43")."""
    from lab.training.phases import BEAT_S

    h = L.launch(
        "tiny",
        name="beating",
        steps=100_000,
        overrides={**FAST, "log_every": 1_000_000},  # logs only at the last step
        store=str(runs / "store.db"),
        runs_dir=str(runs),
        env=ENV,
        nproc=1,
    )
    deadline = time.monotonic() + 120
    seen = []
    while len(seen) < 2:
        assert h.is_alive(), h.log_tail()
        assert time.monotonic() < deadline, f"no heartbeat in 120 s: {seen}"
        s = L.snapshot(h)
        if s["step"] > 0 and (not seen or s["step"] > seen[-1]):
            seen.append(s["step"])
            assert s["state"] == "running" and s["loss_curve"].empty  # nothing logged yet
        time.sleep(BEAT_S / 4)
    L.request_stop(h)
    assert L.wait(h, timeout=120) == "stopped", h.log_tail()
    snap = L.snapshot(h)
    (k,) = {
        int(p.split("_")[1].split(".")[0])
        for p in os.listdir(h.run_dir)
        if p.startswith("ckpt_") and p.endswith(".pt")
    }
    assert snap["step"] == k > seen[-1] and f"step {k}" in snap["message"]


def test_a_resume_that_changes_a_field_replaces_the_override_that_set_it(monkeypatch):
    """A run launched with ``steps`` as an override resumes for more steps (the change replaces
    that override) instead of being refused as given twice."""
    seen = {}
    monkeypatch.setattr(L, "launch", lambda preset, **kw: seen.update(kw, preset=preset))
    h = L.RunHandle(name="r", runs_dir="/nonexistent", store="", pid=0, command=[], preset="tiny", run_dir="/nonexistent/r",
                    steps=8, tokens_per_step=1, learned=False,
                    spec={"preset": "tiny", "name": "r", "overrides": {"steps": "8", "lr": "1e-3"}})  # fmt: skip
    monkeypatch.setattr(h, "is_alive", lambda: False)
    L.resume(h, steps=20)
    assert seen["steps"] == 20 and seen["overrides"] == {"lr": "1e-3"} and seen["resume"]
    assert (
        L.build_config("tiny", steps=20, overrides=seen["overrides"], runs_dir="/tmp").steps == 20
    )


def test_an_attached_run_whose_resume_died_before_its_loop_reads_failed(tmp_path):
    """A resume that dies before its loop begins (a precision refused, a shape that does not
    load, a data error) leaves the store's row as the launch before it left it: "stopped …
    resume to continue".  A fresh kernel's run list (no return code) showed that, beside the
    launching panel's "failed".  Only the loop's exit phase of *this* launch tells how it ended."""
    from lab.training import phases as RP
    from lab.training.stop import mark_stopped

    store = str(tmp_path / "store.db")
    with Store(store) as st:
        st.start_run("r", {"x": 1}, kind="lm", seed=0)
        mark_stopped(st, "r", 3)  # the first launch's end
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    RP.write_phase(str(run_dir), RP.EXITING, status="stopped", step=3)
    first_end = RP.read_phase(str(run_dir))["since"]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()

    def handle(started, store=store):
        return L.RunHandle(
            name="r", preset="tiny", run_dir=str(run_dir), runs_dir=str(tmp_path), store=store,
            pid=dead.pid, command=[], steps=10, tokens_per_step=64, learned=False,
            spec={"preset": "tiny", "name": "r"}, started=started,
        )  # fmt: skip

    resumed = handle(first_end + 60)  # launched a minute after the first one ended; died early
    assert resumed.proc is None and L.state(resumed) == "failed"
    assert L.snapshot(resumed)["state"] == "failed"
    assert L.state(handle(first_end - 1)) == "stopped"  # the launch that did end that way
    assert L.state(handle(first_end - 1, store="")) == "stopped"  # no store: the phase says
    RP.write_phase(str(run_dir), RP.EXITING, status="done", step=10)
    assert L.state(handle(first_end - 1, store="")) == "done"
    # a Ray task writes no phase here: its driver replays the journal into the store, and a
    # row this launch started tells how it ended
    RP.clear_phase(str(run_dir))
    ray_run = handle(time.time())
    with Store(store) as st:
        st.set_status("r", "running")
        st.set_status("r", "done")
    assert L.state(ray_run) == "done"
    assert L.state(handle(time.time() + 60)) == "failed"  # a later launch: not its row
