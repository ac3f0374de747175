"""`lab.machine.cpu_share`: the lab's jobs share the machine's cores (issue 30).

Oracles: the share worked by hand (and its laws over every small case); the registry's files
read back; two real `fiblab train` processes started through the public command, each reporting
in its registry entry the threads torch says it uses; libgomp's own report of the wait policy
it read (``OMP_DISPLAY_ENV=VERBOSE``: ``GOMP_SPINCOUNT = '0'`` is PASSIVE in effect).  Nothing here depends on how fast anything runs: waits are "until, or
fail after a generous limit".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.machine import cpu_share as C
from lab.machine.measure import ROOT
from lab.machine.procs import start_ticks

CORES = C.cores()


@pytest.fixture
def jobs_dir(tmp_path, monkeypatch):
    """A private registry; no pin or switch from the calling environment."""
    d = tmp_path / "jobs"
    monkeypatch.setenv(C.ENV_DIR, str(d))
    for var in (C.ENV_THREADS, C.ENV_SHARE):
        monkeypatch.delenv(var, raising=False)
    return d


# --------------------------------------------------------------------------------------------
# the share, by hand and by its laws
# --------------------------------------------------------------------------------------------
def test_the_share_by_hand():
    assert C.allot(2, [(2, False)]) == [2]  # alone: every core, as before
    assert C.allot(2, [(2, False), (2, False)]) == [1, 1]
    assert C.allot(8, [(8, False)] * 3) == [3, 3, 2]  # the remainder to the oldest
    assert C.allot(7, [(7, False)] * 4) == [2, 2, 2, 1]
    assert C.allot(2, [(2, False)] * 3) == [1, 1, 1]  # more jobs than cores: one each
    # a --jobs 4 grid's 1-thread workers leave the other cores to a training run
    assert C.allot(16, [(1, False)] * 4 + [(16, False)]) == [1, 1, 1, 1, 12]
    assert C.allot(16, [(16, False), (4, False), (4, False)]) == [8, 4, 4]
    # pinned (FIBLAB_THREADS, a Ray task) first, never changed; the rest shared
    assert C.allot(8, [(6, True), (8, False), (8, False)]) == [6, 1, 1]
    assert C.allot(2, [(4, True), (2, False)]) == [4, 1]
    assert C.allot(4, []) == []


_job = st.tuples(st.integers(1, 16), st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 16), st.lists(_job, max_size=8))
def test_the_laws_of_the_share(n, jobs):
    out = C.allot(n, jobs)
    assert len(out) == len(jobs) and all(t >= 1 for t in out)
    flex = [i for i, (_, pinned) in enumerate(jobs) if not pinned]
    for (cap, pinned), t in zip(jobs, out):
        assert t == cap if pinned else t <= cap
    room = n - sum(cap for cap, pinned in jobs if pinned)
    if room >= len(flex):  # a thread each fits: together they never use more than the cores
        assert sum(out) <= n
        if any(out[i] < jobs[i][0] for i in flex):  # someone wants more: no core left idle
            assert sum(out) == n
    uncapped = [out[i] for i in flex if out[i] < jobs[i][0]]
    assert uncapped == sorted(uncapped, reverse=True)  # older first
    assert max(uncapped, default=0) - min(uncapped, default=0) <= 1  # equal parts


def test_the_override_variables():
    assert C.pinned_threads({}) is None and C.pinned_threads({C.ENV_THREADS: " 3 "}) == 3
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match=C.ENV_THREADS):
            C.pinned_threads({C.ENV_THREADS: bad})
    assert C.sharing({}) and C.sharing({C.ENV_SHARE: "1"})
    assert not any(C.sharing({C.ENV_SHARE: v}) for v in ("0", "false", "No", "off"))


# --------------------------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------------------------
def _entry(folder, **kw) -> C.Job:
    job = C.Job(
        **{
            "pid": os.getpid(),
            "kind": "train",
            "name": "x",
            "threads": 1,
            "cap": 1,
            "pinned": False,
            "started": time.time(),
            "pgid": os.getpgrp(),
            "seq": 10_000,
            "boot_ticks": start_ticks(os.getpid()),
            **kw,
        }
    )
    C._write(str(folder), job)
    return job


def test_register_list_and_leave_restoring_the_threads(jobs_dir):
    before = torch.get_num_threads()
    with C.Share("train", "run-a") as share:
        (job,) = C.live_jobs()
        assert job.key == share.job.key and job.kind == "train" and job.name == "run-a"
        assert job.pid == os.getpid() and job.cap == before and not job.pinned
        assert job.threads == torch.get_num_threads() == before  # alone: all it had
        # a second, younger job in this process: the cores are split, the older first
        with C.Share("probe", "cell") as other:
            share.rebalance()
            a, b = C.live_jobs()
            assert (a.name, b.name) == ("run-a", "cell")
            assert [a.threads, b.threads] == C.allot(CORES, [(before, False), (before, False)])
            assert other.job.threads == b.threads
    assert C.live_jobs() == [] and os.listdir(jobs_dir) == []
    assert torch.get_num_threads() == before


def test_dead_and_reused_pids_are_ignored_and_removed(jobs_dir):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    _entry(jobs_dir, pid=p.pid, seq=1)  # a job that died without leaving
    _entry(jobs_dir, seq=2, boot_ticks=1)  # our pid, but another process's start time
    (jobs_dir / "half.json").write_text("{")  # being written: skipped, kept
    live = _entry(jobs_dir, seq=3)
    assert C.live_jobs() == [live]
    assert sorted(os.listdir(jobs_dir)) == sorted(["half.json", live.key + ".json"])


def test_an_exception_leaves_the_registry_and_the_threads_as_they_were(jobs_dir, monkeypatch):
    """A training run that fails mid-loop: its entry is gone, torch has its threads back."""
    from lab.training.train import train
    from lab.training.trainconfig import make_config

    seen = []

    class FailingStore:  # a store-shaped writer (lab.training.train's ``store``) that fails at step 2
        def log_metrics(self, name, step, row):
            seen.append(C.live_jobs())
            if step == 2:
                raise RuntimeError("disk full")

        def __getattr__(self, name):
            return lambda *a, **k: None

    before = torch.get_num_threads()
    cfg = make_config("tiny", {"steps": 4, "eval_every": 0, "run_dir": str(jobs_dir.parent)})
    with pytest.raises(RuntimeError, match="disk full"):
        train(cfg, quiet=True, store=FailingStore())
    assert [j.kind for j in seen[0]] == ["train"] and seen[0][0].name == cfg.name
    assert C.live_jobs() == [] and torch.get_num_threads() == before


def test_a_probe_cell_registers_while_it_trains(jobs_dir):
    from dataclasses import replace

    from probes.runner import run_cell
    from probes.settings import SCALES, Cell

    seen = []
    settings = replace(SCALES["tiny"], steps=2, log_every=1)
    cell = Cell("fib-fixed", 2, "-", 0)
    run_cell(cell, settings, progress=False, on_step=lambda *a: seen.append(C.live_jobs()))
    assert seen and [(j.kind, j.name) for j in seen[0]] == [("probe", cell.key(settings))]
    assert C.live_jobs() == []


def test_pinned_and_switched_off_jobs_keep_their_threads(jobs_dir, monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setenv(C.ENV_THREADS, "3")
    with C.Share("train", "pinned") as s:
        assert torch.get_num_threads() == 3 and s.job.pinned and s.job.cap == 3
        _entry(jobs_dir, cap=64, threads=64, started=0.0)  # an older, greedy job
        assert s.rebalance() == 3 == torch.get_num_threads()
    assert torch.get_num_threads() == before
    monkeypatch.delenv(C.ENV_THREADS)
    monkeypatch.setenv(C.ENV_SHARE, "0")
    with C.Share("train", "off") as s:
        assert s.job.pinned and s.rebalance() == before == torch.get_num_threads()


def test_a_ray_task_is_pinned_at_its_threads(jobs_dir):
    before = torch.get_num_threads()
    try:
        C.pin(1)
        with C.Share("probe", "ray cell") as s:
            assert s.job.pinned and s.job.threads == 1 == torch.get_num_threads()
    finally:
        C.pin(None)
        torch.set_num_threads(before)
    with C.Share("probe", "after") as s:
        assert not s.job.pinned


def test_the_panel_line_and_the_estimate_say_what_shares_the_machine(jobs_dir, tmp_path):
    from fiblab.jobs import train_estimate as TE
    from fiblab.ui.train import TrainPanel

    alone = C.describe([], 2)
    assert alone == "2 cores, no other lab job: a new job gets 2 threads"
    other = _entry(jobs_dir, name="run-a", cap=2, threads=2, pgid=-7, started=0.0)
    assert C.describe([other], 2) == (
        "2 cores, 1 other lab job (train run-a: 2): a new job gets 1 thread"
    )
    mine = _entry(jobs_dir, name="mine", seq=5, threads=1)
    assert C.describe([other, mine], 2, own_pgid=mine.pgid) == (
        "2 cores, 1 other lab job (train run-a: 2): this job uses 1 thread"
    )
    speed = TE.Speed(1e9, "a recorded run", 1e6)
    assert TE.shared_slowdown(speed, [], 2) == (1.0, "")
    assert TE.shared_slowdown(speed, [other], 2) == (
        2.0,
        "sharing the 2 cores with 1 other lab job (1 thread of 2 while they run)",
    )
    assert TE.shared_slowdown(TE.Speed(1e9, "timed now", 1e6, True), [other], 2)[0] == 1.0

    os.remove(jobs_dir / f"{mine.key}.json")
    panel = TrainPanel(runs=str(tmp_path), store="", auto_refresh=False, render=False, gpus=0)
    assert "1 other lab job (train run-a: 2): a new job gets" in panel.share_box.value
    panel.handle, panel.snap = SimpleNamespace(pid=os.getpgrp()), {"state": "running"}
    _entry(jobs_dir, name="mine", seq=6, threads=1)
    panel.show_share()
    assert "this job uses 1 thread" in panel.share_box.value


# --------------------------------------------------------------------------------------------
# real processes through the public command
# --------------------------------------------------------------------------------------------
def _train(tmp_path, name, env):
    """``fiblab train --preset tiny`` for 100,000 steps (until `_stop`), output to a file."""
    over = [f"run_dir={tmp_path}", "eval_every=0", "ckpt_every=100000", "log_every=100000"]
    cmd = [sys.executable, "-m", "fiblab.cli", "train", "--preset", "tiny", "--name", name]
    cmd += ["--steps", "100000", "--store", "", "--override", *over]
    with open(tmp_path / f"{name}.log", "w") as log:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _until(cond, what: str, limit: float = 180.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"never {what} within {limit:.0f} s")


def _stop(tmp_path, procs, names):
    from lab.training.stop import request_stop

    for name in names:
        request_stop(str(tmp_path / name))
    for p in procs:
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return [(tmp_path / f"{name}.log").read_text() for name in names]


@pytest.mark.skipif(CORES < 2, reason="two jobs cannot share one core")
def test_two_cli_runs_together_use_no_more_threads_than_cores(tmp_path, jobs_dir):
    env = {**os.environ, C.ENV_DIR: str(jobs_dir), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("OMP_NUM_THREADS", None)
    procs = [_train(tmp_path, name, env) for name in ("a", "b")]
    try:
        both = _until(
            lambda: (j := C.live_jobs()) and len(j) == 2 and j,
            "saw both runs registered",
        )
        assert {j.pid for j in both} == {p.pid for p in procs}
        assert not any(j.pinned for j in both)
        # torch's default (every core) each: alone, either would keep them all
        assert sum(j.cap for j in both) > CORES, "torch did not start on every core here"
        shared = _until(
            lambda: (
                (j := C.live_jobs()) and len(j) == 2 and sum(t.threads for t in j) <= CORES and j
            ),
            "saw the two runs' threads fit the cores",
        )
        assert [j.threads for j in shared] == C.allot(CORES, [(j.cap, False) for j in shared])
    finally:
        outs = _stop(tmp_path, procs, ("a", "b"))
    assert [p.returncode for p in procs] == [0, 0], outs
    # each said what it uses (the run that had to shrink, at least)
    assert any(f"of {CORES} cores (2 lab jobs on this machine)" in o for o in outs), outs
    assert C.live_jobs() == []


@pytest.mark.slow  # 9 s; the pin's law is in test_the_laws_of_the_share, two real runs above
@pytest.mark.skipif(CORES < 2, reason="a pinned job and a shared one need two cores")
def test_a_pinned_cli_run_keeps_its_threads_and_the_others_take_the_rest(tmp_path, jobs_dir):
    env = {**os.environ, C.ENV_DIR: str(jobs_dir), C.ENV_THREADS: "1"}
    env.pop("OMP_NUM_THREADS", None)
    proc = _train(tmp_path, "pinned", env)
    try:
        (job,) = _until(lambda: C.live_jobs(), "saw the pinned run registered")
        assert job.pinned and job.threads == job.cap == 1 and job.pid == proc.pid
        mine = torch.get_num_threads()
        with C.Share("train", "here") as s:
            assert s.job.threads == min(mine, CORES - 1) == torch.get_num_threads()
            assert C.live_jobs()[0].threads == 1
    finally:
        _stop(tmp_path, [proc], ["pinned"])
    assert proc.returncode == 0


# --------------------------------------------------------------------------------------------
# the wait policy the children's OpenMP runtime read: the user's, never set by the lab
# --------------------------------------------------------------------------------------------
def _omp_report(jobs_dir, env_add: dict) -> str:
    """What libgomp read in a ``fiblab`` command that loads torch (registry ``jobs_dir``)."""
    env = {**os.environ, "OMP_DISPLAY_ENV": "VERBOSE", C.ENV_DIR: str(jobs_dir), **env_add}
    for var in ("OMP_WAIT_POLICY", C.ENV_SHARE):
        if var not in env_add:
            env.pop(var, None)
    done = subprocess.run(
        [sys.executable, "-m", "fiblab.cli", "params", "--preset", "probe-small"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


def test_the_lab_leaves_the_wait_policy_to_the_user_even_beside_other_jobs(
    tmp_path, jobs_dir, monkeypatch
):
    """PASSIVE made a job alone 1.6–1.7× slower and libgomp reads it once, so the lab never sets
    it (the share keeps the jobs' threads within the cores instead): libgomp in a ``fiblab``
    command beside a live lab job reads torch's default, or the user's own policy; a launched
    child gets no policy the user did not set."""
    from fiblab.jobs import detached

    _entry(jobs_dir, name="another run")  # a live lab job
    beside = _omp_report(jobs_dir, {})
    assert "OMP_DISPLAY_ENV" in beside or "OPENMP DISPLAY ENVIRONMENT" in beside
    assert "GOMP_SPINCOUNT = '0'" not in beside  # not PASSIVE
    mine = _omp_report(jobs_dir, {"OMP_WAIT_POLICY": "PASSIVE"})
    assert "GOMP_SPINCOUNT = '0'" in mine  # the user's own choice reaches libgomp
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    show = [sys.executable, "-c", "import os; print('policy', os.environ.get('OMP_WAIT_POLICY'))"]
    log = tmp_path / "child.txt"
    detached.start(show, str(log)).wait()
    assert log.read_text().splitlines()[-1] == "policy None"


def test_the_registry_files_are_plain_json(jobs_dir):
    with C.Share("train", "r") as s:
        (path,) = jobs_dir.iterdir()
        rec = json.loads(path.read_text())
        assert rec["pid"] == os.getpid() and rec["threads"] == s.job.threads
        assert set(rec) >= {"pid", "kind", "name", "threads", "started"}


@pytest.mark.slow
def test_the_concurrency_benchmark_runs_and_says_machine_ratio_and_load(tmp_path):
    out = tmp_path / "c.json"
    argv = ["--smoke", "--kinds", "probe", "--counts", "2", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "concurrent_jobs.py"), *argv],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert " · capability " in lines[0] and lines[-1].endswith("while this ran")
    rows = json.loads(out.read_text())["rows"]
    assert [(r["kind"], r["jobs"]) for r in rows] == [("probe", 1), ("probe", 2)]
    two = rows[1]
    assert two["fair_share_ratio"] == pytest.approx(
        sum(two["wall_s"]) / 2 / (2 * rows[0]["wall_s"][0])
    )
