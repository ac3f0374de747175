"""A stopped search leaves no trial RUNNING, whenever the stop lands.

The race behind one CI failure in five: a search killed in the middle of an SQLite write leaves
a *hot journal*; the clean-up's read-only look at the study then failed with
SQLITE_READONLY_ROLLBACK, read as "no study yet", and the trial the stop interrupted stayed
RUNNING for ever.  The oracle here is a real process that asks a trial and dies inside a write
transaction, every time (no timing luck), and Optuna's own reading of the study afterwards."""

import os
import select
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from fiblab.jobs import search_launch as SL

optuna = pytest.importorskip("optuna")

CHILD = textwrap.dedent(
    """
    import os, signal, sqlite3, sys
    import optuna
    from analysis.experiments.search.search import ask
    url, db = sys.argv[1], sys.argv[2]
    study = optuna.load_study(study_name="killed", storage=url)
    trial = ask(study)  # RUNNING, its driver this process
    print(trial.number, flush=True)
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA cache_size = 1")  # a change spills to the file at once: SQLite first
    con.execute("BEGIN IMMEDIATE")  # writes the original pages to the journal
    con.execute("UPDATE pad SET x = randomblob(1000)")
    os.kill(os.getpid(), signal.SIGKILL)  # dies holding the write: the journal is hot
    """
)


def test_a_search_killed_mid_write_has_its_trial_failed_not_left_running(tmp_path):
    folder = tmp_path / "searches" / "killed"
    folder.mkdir(parents=True)
    db = folder / SL.STUDY_DB
    url = f"sqlite:///{db}"
    optuna.create_study(study_name="killed", storage=url)
    with sqlite3.connect(db) as con:  # pages a write will change, as a study's rows do
        con.execute("CREATE TABLE pad (x BLOB)")
        con.executemany("INSERT INTO pad VALUES (randomblob(1000))", [()] * 200)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(db)], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == -9, child.stderr
    number = int(child.stdout.split()[0])
    assert os.path.getsize(str(db) + "-journal") > 0  # the journal the killed writer left
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # what the old check hit
        sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute("SELECT 1 FROM studies")

    h = SL.SearchHandle(
        name="killed", runs_dir=str(tmp_path), store="", pid=-1, command=[], folder=str(folder),
        space="linear", objectives=["distinct"], trials=1, seed=0, storage=url,
    )  # fmt: skip
    assert SL._fail_abandoned(h, until=0.0) == [number]  # its driver is gone: whoever stops
    study = optuna.load_study(study_name="killed", storage=url)
    assert [t.state.name for t in study.get_trials()] == ["FAIL"]


def test_a_search_that_ends_between_the_two_reads_is_never_failed(tmp_path, monkeypatch):
    """The launcher's race (issue 38) in the search's state: the study read with its last trial
    still running, then the search finishes it and exits, then liveness — an attached search
    (no return code) dead with trials short read "failed".  Scripted: the search ends the moment
    anything about it is looked at."""
    study = optuna.create_study()
    for x in (1.0, 2.0):
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=x))
    running = study.ask()  # the last trial, still running
    h = SL.SearchHandle(
        name="ends", runs_dir=str(tmp_path), store="", pid=-1, command=[], folder=str(tmp_path),
        space="linear", objectives=["distinct"], trials=3, seed=0, storage="",
    )  # fmt: skip
    ended = []

    def end():
        if not ended:
            ended.append(True)
            study.tell(running, 3.0)  # it finishes its last trial and exits right after

    def load(_h, storage=None):
        end_after = not ended
        snap = optuna.create_study()  # what the read saw: the study at that moment
        snap.add_trials(study.get_trials())
        if end_after:
            end()
        return snap

    def alive(self):
        was = not ended
        end()
        return was

    monkeypatch.setattr(SL, "load_study", load)
    monkeypatch.setattr(SL.SearchHandle, "is_alive", alive)
    first = SL.state(h)
    assert first.state in ("running", "starting"), first  # alive when looked at
    assert SL.state(h).state == "done"  # and then at its end: never "failed"


def test_a_search_that_finished_as_its_stop_was_asked_is_done(tmp_path, monkeypatch):
    """`request_stop` reads the search alive, then it finishes its last trial and exits, then
    STOP is written: every trial is in, yet it read "stopped" (resumable, with nothing left to
    run).  Scripted: the finished study and the STOP file, the process gone."""
    study = optuna.create_study()
    for x in (1.0, 2.0):
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=x))
    h = SL.SearchHandle(
        name="late", runs_dir=str(tmp_path), store="", pid=-1, command=[], folder=str(tmp_path),
        space="linear", objectives=["distinct"], trials=2, seed=0, storage="",
    )  # fmt: skip
    (tmp_path / "STOP").write_text("stop requested\n")
    monkeypatch.setattr(SL.SearchHandle, "is_alive", lambda self: False)
    assert SL.state(h, study).state == "done"
    study2 = optuna.create_study()
    study2.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    assert SL.state(h, study2).state == "stopped"  # one trial short: the stop holds
    # launched here, every trial in, ended by the stop's SIGTERM: it was stopped in its rerun
    # of the best trials on fresh seeds, which a resume still has to do
    h.proc = type("Exited", (), {"returncode": -signal.SIGTERM})()
    assert SL.state(h, study).state == "stopped"


def test_a_trial_asked_but_not_yet_marked_with_its_driver_is_failed_by_this_launchs_stop(
    tmp_path,
):
    """A stop can land between `study.ask()` and the driver's mark on the trial: no driver to
    check, so the stop fails the RUNNING trials begun since this launch started — and only
    those (one begun before it is no trial of this process's), and only until a later launch
    started (a stale handle's stop of a crashed search may be beside one)."""
    import time

    folder = tmp_path / "searches" / "unmarked"
    folder.mkdir(parents=True)
    url = f"sqlite:///{folder / SL.STUDY_DB}"
    study = optuna.create_study(study_name="unmarked", storage=url)
    number = study.ask().number  # RUNNING, no driver recorded yet

    def handle(started):
        return SL.SearchHandle(
            name="unmarked", runs_dir=str(tmp_path), store="", pid=-1, command=[],
            folder=str(folder), space="linear", objectives=["distinct"], trials=1, seed=0,
            storage=url, started=started,
        )  # fmt: skip

    inf = float("inf")
    assert SL._fail_abandoned(handle(time.time() + 60), until=inf) == []  # begun before it
    # begun after a later launch started: that launch's trial
    assert SL._fail_abandoned(handle(time.time() - 60), until=time.time() - 30) == []
    assert [t.state.name for t in optuna.load_study(study_name="unmarked", storage=url).trials] == [
        "RUNNING"
    ]
    assert SL._fail_abandoned(handle(time.time() - 60), until=inf) == [number]  # begun after
    assert [t.state.name for t in optuna.load_study(study_name="unmarked", storage=url).trials] == [
        "FAIL"
    ]


def test_request_stop_fails_the_trial_its_kill_interrupts(tmp_path):
    """`request_stop` kills the search's process group, then tells FAIL the trial it
    interrupted.  The search panel's stop test cannot pin that: its trials take microseconds,
    so its kill almost never lands inside one.  Here the process holds a trial RUNNING (its
    driver marked, as `ask` marks it) and sleeps, so the kill always interrupts it."""
    folder = tmp_path / "searches" / "held"
    folder.mkdir(parents=True)
    url = f"sqlite:///{folder / SL.STUDY_DB}"
    optuna.create_study(study_name="held", storage=url)
    code = textwrap.dedent(
        """
        import sys, time
        import optuna
        from analysis.experiments.search.search import ask
        trial = ask(optuna.load_study(study_name="held", storage=sys.argv[1]))
        print(trial.number, flush=True)
        time.sleep(120)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, url], stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)  # a hang guard, not a timing
        assert ready, "the child never asked its trial"
        number = int(proc.stdout.readline())  # its trial is RUNNING now
        h = SL.SearchHandle(
            name="held", runs_dir=str(tmp_path), store="", pid=-1, command=[],
            folder=str(folder), space="linear", objectives=["distinct"], trials=1, seed=0,
            storage=url,
        )  # fmt: skip
        h.bind(proc)
        assert SL.request_stop(h, timeout=5)
        study = optuna.load_study(study_name="held", storage=url)
        assert [(t.number, t.state.name) for t in study.get_trials()] == [(number, "FAIL")]
        assert SL.state(h).state == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
