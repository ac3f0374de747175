"""Sweeps on Ray (fiblab.cluster.ray_run) against a real two-node cluster on this machine.

The oracle is the lab's own local path: the same cells (`probes.grid.run_grid`) and the same
runs (`lab.training.train.train` into a store) run here in this process, on the same one torch thread a
task uses, give the numbers the cluster's tasks give, apart from seconds.  One cluster (Ray's
`ray.cluster_utils.Cluster`, a head and a worker node of 1 CPU each) serves the whole file.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from ray_support import two_node_cluster

ray = pytest.importorskip("ray")

from lab.store import Store  # noqa: E402
from lab.store.journal import StoreJournal, finished, read_journal, replay  # noqa: E402

TIMING = {"tokens_per_s", "eval_s"}  # metrics that measure the machine, not the model


@pytest.fixture(scope="module")
def cluster():
    yield from two_node_cluster()


@pytest.fixture
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # what a task of --ray-threads 1 computes on
    yield
    torch.set_num_threads(before)


def _tiny_settings():
    from probes.settings import SCALES

    return replace(SCALES["tiny"], steps=20, log_every=10, precision="fp32")


_START = re.compile(r"^start  (\S+)  on node ([0-9a-f]{8}) \(.+\)  at (\d+)s$")
_DONE = re.compile(r"^\[(\d+)/(\d+)\] done  (\S+)  on node ([0-9a-f]{8}) \(.+\)  (\d+)s")


def _task_lines(err: str, names: list[str]) -> dict:
    """The per-task lines of a Ray run's stderr: each name started once and finished once, on a
    node of the cluster, its start line first; the done lines counted 1..n."""
    nodes = {n["NodeID"][:8] for n in ray.nodes()}
    starts, dones = {}, {}
    for i, line in enumerate(err.replace("\r", "\n").splitlines()):
        if m := _START.match(line):
            assert m[1] not in starts, line
            starts[m[1]] = (i, m[2])
        elif m := _DONE.match(line):
            assert m[3] not in dones, line
            dones[m[3]] = (i, m[4], int(m[1]), int(m[2]))
    assert sorted(starts) == sorted(dones) == sorted(names), err
    assert sorted(d[2] for d in dones.values()) == list(range(1, len(names) + 1))
    for name in names:
        assert starts[name][0] < dones[name][0] and starts[name][1] == dones[name][1]
        assert starts[name][1] in nodes and dones[name][3] == len(names)
    return {n: s[1] for n, s in starts.items()}


def test_probe_grid_on_ray_equals_the_local_grid(cluster, tmp_path, one_thread, capsys):
    from fiblab.cluster.ray_run import run_probe_grid
    from probes.grid import grid, load_records, run_grid

    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    settings = _tiny_settings()
    cells = grid(["fib-fixed", "learned"], [2], ["uniform"], [0, 1])
    assert len(cells) == 4
    local = run_grid(cells, settings, str(tmp_path / "local.jsonl"), progress=False)
    capsys.readouterr()
    out = str(tmp_path / "ray.jsonl")
    seen = []
    got = run_probe_grid(cells, settings, out, progress=True, on_record=seen.append)
    err = capsys.readouterr().err
    keys = [c.key(settings.resolved()) for c in cells]
    assert "4 cells on Ray: 1 CPU thread(s) per task, 2 at once" in err
    assert "probe cells: 100%" in err and "4/4" in err  # the one overall bar, to its end
    _task_lines(err, keys)  # a start and a done line per cell, naming its node
    assert [r["key"] for r in got] == keys
    for a, b in zip(local, got):
        a, b = dict(a), dict(b)
        assert a.pop("seconds") > 0 and b.pop("seconds") > 0
        assert a == b  # same seeds, same numbers: α, accuracy, trajectory, loss curve
    assert sorted(r["key"] for r in seen) == sorted(r["key"] for r in got)  # each once
    lines = load_records(out)
    assert len(lines) == 4 and len({r["key"] for r in lines}) == 4
    # a re-run starts nothing: every cell is in the file, none is appended again
    again = run_probe_grid(cells, settings, out, progress=False, on_record=seen.append)
    assert again == got and len(load_records(out)) == 4 and len(seen) == 4


def test_probe_cells_on_ray_report_live_and_obey_a_stop_request(cluster, tmp_path):
    from fiblab.cluster.ray_run import run_probe_grid
    from lab.training.stop import request_stop
    from probes.grid import grid, load_records
    from probes.live import LIVE_DIR, LiveSpec, StopRequested

    settings = _tiny_settings()
    cells = grid(["fib-fixed"], [2], ["uniform"], [0, 1])
    live = LiveSpec(str(tmp_path / "grid"), every_s=0.0, eval_points=0)
    seen_live = []

    def keep(rec):  # the cell's live file was written on the worker, still there here
        seen_live.append(live.read(rec["key"]) is not None)

    out = str(tmp_path / "g.jsonl")
    recs = run_probe_grid(cells, settings, out, progress=False, on_record=keep, live=live)
    assert len(recs) == 2 and seen_live == [True, True]
    from probes.live import read_progress

    assert read_progress(live.folder)["lanes"] == 2  # 2 nodes × 1 CPU, 1 CPU a task: the ETA's
    assert os.listdir(tmp_path / "grid" / LIVE_DIR) == []  # kept cells are no longer running
    more = grid(["fib-fixed"], [2], ["uniform"], [0, 1, 2])
    request_stop(live.folder)
    with pytest.raises(StopRequested):
        run_probe_grid(more, settings, out, progress=False, live=live)
    kept = sorted(r["key"] for r in load_records(out))  # file order: as the cells finished
    assert kept == sorted(r["key"] for r in recs)  # nothing added


def _configs(root, steps=4, names=("a", "b"), every=2):
    from lab.training.trainconfig import make_config

    over = {"run_dir": str(root), "steps": steps, "ckpt_every": every, "eval_every": every}
    return [
        make_config("tiny", {**over, "seed": s, "name": f"{n}-s{s}"}) for s, n in enumerate(names)
    ]


def _numbers(store_path: str, name: str) -> dict:
    """A run's numbers in the store: metrics (timing apart), evaluations, α."""
    with Store(store_path) as st:
        m = st.metrics(name)
        m = m[~m["name"].isin(TIMING)]
        ev = st.evals(name)
        al = st.alphas(name)
        return {
            "metrics": sorted(zip(m["step"], m["name"], m["value"])),
            "evals": sorted(zip(ev["step"], ev["kind"], ev["context_len"], ev["loss"])),
            "alphas": sorted(zip(al["step"], al["layer"], al["alpha"])),
            "status": st.runs()[lambda d: d["name"] == name]["status"].tolist(),
        }


def test_lm_sweep_on_ray_equals_local_runs_and_a_rerun_skips(cluster, tmp_path, one_thread, capsys):
    from fiblab.cluster.ray_run import run_sweep
    from lab.training.train import train

    local_store = str(tmp_path / "local.db")
    for cfg in _configs(tmp_path / "local"):
        train(cfg, store_path=local_store, quiet=True)
    store = str(tmp_path / "ray.db")
    cfgs = _configs(tmp_path / "ray")
    capsys.readouterr()
    res = run_sweep(cfgs, store, progress=True)
    err = capsys.readouterr().err
    assert "2 of 2 runs on Ray (0 finished before): 1 CPU thread(s) per task, 2 at once" in err
    assert "sweep runs: 100%" in err and "2/2" in err
    _task_lines(err, ["a-s0", "b-s1"])
    assert [(r.name, r.outcome) for r in res] == [("a-s0", "trained"), ("b-s1", "trained")]
    for cfg, r in zip(cfgs, res):
        want = _numbers(local_store, cfg.name)
        assert want["metrics"] and want["evals"] and want["alphas"]  # tiny learns α
        assert _numbers(store, cfg.name) == want
        with Store(local_store) as st:
            full = st.evals(cfg.name).query("kind == 'recompute'")
        assert r.final_ppl == pytest.approx(dict(zip(full["dataset"], full["perplexity"])))
    with Store(store) as st:
        events = len(st.events())
    again = run_sweep(cfgs, store, progress=False)
    assert [r.outcome for r in again] == ["skipped", "skipped"]
    with Store(store) as st:
        assert len(st.events()) == events  # nothing logged twice
    for cfg in cfgs:
        assert _numbers(store, cfg.name) == _numbers(local_store, cfg.name)
    # the same names with another configuration: refused, naming the run; nothing written
    other = [replace(c, steps=6) for c in cfgs]
    with pytest.raises(
        ValueError, match=r"sweep run 'a-s0' is done in .*\(steps=4 there, steps=6 now\)"
    ):
        run_sweep(other, store, progress=False)
    reseeded = [replace(cfgs[0]), replace(cfgs[1], seed=5)]
    with pytest.raises(ValueError, match=r"'b-s1' .*seed=1 there, seed=5 now"):
        run_sweep(reseeded, store, progress=False)
    with Store(store) as st:
        assert len(st.events()) == events


def test_journal_replayed_twice_duplicates_nothing(tmp_path):
    j = StoreJournal(str(tmp_path / "j.jsonl"))
    j.start_run("r", {"x": 1}, kind="lm", seed=0, resume=False)
    j.log_event("r", "start", "step 0")
    j.log_metrics("r", 1, {"loss": 2.5, "nan": float("nan")})
    j.log_alphas("r", 1, [0.5, 1.5])
    j.log_eval("r", 1, "val", 16, 1.0, 100, kind="recompute")
    j.set_status("r", "done")
    with open(j.path, "a") as f:
        f.write('{"call": "log_ev')  # a torn last line (a killed writer) is ignored
    entries = read_journal(j.path)
    assert [e["call"] for e in entries] == [
        "start_run", "log_event", "log_metrics", "log_alphas", "log_eval", "set_status",
    ]  # fmt: skip
    assert finished(entries) and not finished(entries[:-1])
    with Store(str(tmp_path / "s.db")) as st:
        replay(entries[:2], st)  # a replay cut short after the first event
        replay(entries, st)
        replay(entries, st)
        assert st.events("r")["kind"].tolist() == ["start"]
        assert sorted(st.metrics("r")["name"]) == ["loss", "nan"]
        assert st.alphas("r")["alpha"].tolist() == [0.5, 1.5]
        assert st.evals("r")["perplexity"].tolist() == pytest.approx([2.718281828])
        assert st.runs()["status"].tolist() == ["done"]
    with Store(str(tmp_path / "follow.db")) as st:  # a driver following the growing journal
        for n in range(1, len(entries) + 1):
            replay(entries[:n], st, start=n - 1)
        assert st.events("r")["kind"].tolist() == ["start"]
        assert sorted(st.metrics("r")["name"]) == ["loss", "nan"]
        assert st.runs()["status"].tolist() == ["done"]


def test_a_replay_keeps_every_journal_event_beside_events_written_by_others(tmp_path):
    """The launcher writes a run's "terminated" straight into the store; a resumed Ray run's
    driver then replays the whole journal.  Held events were skipped by count, so the
    launcher's one hid the journal's next real event (its "resume" never reached the store).
    Oracle: the store's events are the launcher's plus the journal's, each once."""
    j = StoreJournal(str(tmp_path / "j.jsonl"))
    j.start_run("r", {"x": 1}, kind="lm", seed=0, resume=False)
    j.log_event("r", "start", "step 0")
    j.log_event("r", "note", None)
    with Store(str(tmp_path / "s.db")) as st:
        replay(read_journal(j.path), st)  # the first driver
        st.log_event("r", "terminated", "SIGTERM from fiblab.jobs.launch.terminate")
        j.log_event("r", "resume", "step 40")  # the resumed task appends to the journal
        j.log_event("r", "start", "step 0")  # the same words again: a second, real event
        replay(read_journal(j.path), st)  # the resumed run's driver replays it all
        replay(read_journal(j.path), st)  # and again: nothing twice
        kinds = st.events("r")["kind"].tolist()
    assert kinds == ["start", "note", "terminated", "resume", "start"]


def test_a_replay_stamps_each_line_with_when_it_was_written(tmp_path):
    """A journal line carries its call's time; replayed, a start, status or event is stamped
    with it, not with the replay's (a resumed run's driver replays the earlier attempt's lines:
    stamped "now" they read as this attempt's; `fiblab.jobs.launch` then said "stopping").
    Lines from before (no time) are stamped at the replay, as they were."""
    import pandas as pd

    j = StoreJournal(str(tmp_path / "j.jsonl"))
    j.start_run("r", {"x": 1}, kind="lm", seed=0, resume=False)
    j.log_event("r", "start", "step 0")
    j.set_status("r", "stopped", "by request")
    entries = read_journal(j.path)
    when = [pd.Timestamp(e["t"]) for e in entries]
    assert when == sorted(when) and len(set(when)) == 3
    with Store(str(tmp_path / "s.db")) as st:
        replay(entries, st)
        replay(entries, st)  # a resumed run's driver, later: nothing moves
        row, ev = st.runs().iloc[0], st.events("r")
        assert (row["started_at"], ev["time"].tolist()) == (when[0], [when[1]])
    old = [{k: v for k, v in e.items() if k != "t"} for e in entries]
    with Store(str(tmp_path / "old.db")) as st:
        before = pd.Timestamp.now(tz="UTC")
        replay(old, st)
        assert st.runs().iloc[0]["started_at"] >= before


def test_a_journal_from_before_schema_4_replays_with_todays_kind_words(tmp_path):
    """A journal written when the store said 'full' / 'frozen' replays as 'recompute' /
    'freeze', and its final perplexity is still found."""
    from fiblab.cluster.ray_run import journal_final_ppl

    j = StoreJournal(str(tmp_path / "old.jsonl"))
    j.start_run("r", {"x": 1}, kind="lm", seed=0, resume=False)
    j.log_eval("r", 1, "val", 16, 1.0, 100, kind="full")
    j.log_eval("r", 1, "val", 16, 2.0, 100, kind="frozen:block0")
    j.log_eval("r", 2, "val", 16, 3.0, 100)  # no kind: the default, then and now the paper's
    j.set_status("r", "done")
    entries = read_journal(j.path)
    assert journal_final_ppl(entries[:2]) == {"val": pytest.approx(math.e)}
    with Store(str(tmp_path / "s.db")) as st:
        replay(entries, st)
        ev = st.evals("r").sort_values("loss")
        assert ev["kind"].tolist() == ["recompute", "freeze:block0", "recompute"]
        assert ev["step"].tolist() == [1, 1, 2] and ev["loss"].tolist() == [1.0, 2.0, 3.0]


def _sweep_cli(spec, runs, store, address, **kw):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    argv = [sys.executable, "-m", "fiblab.cli", "sweep", str(spec), "--runs", str(runs)]
    argv += ["--store", str(store), "--ray", address, "--quiet"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _checkpoints(folder) -> list[str]:
    """The complete checkpoints in ``folder``, by the product's own definition (a ``.pt`` under
    its name).  A bare ``ckpt_`` prefix also matched the checksum sidecar, which
    `save_checkpoint` renames in before the checkpoint: a kill then could still lose the
    checkpoint the test believed was there (the flake check's failure, 2026-12-07)."""
    from lab.training.checkpoint import list_checkpoints

    return [os.path.basename(p) for p in list_checkpoints(str(folder))]


def test_the_checkpoint_helper_counts_a_checkpoint_only_once_it_is_whole(tmp_path, monkeypatch):
    """The kill tests wait for `_checkpoints`: at the moment the sidecar is on disk and the
    checkpoint not yet renamed in, it must see none (a kill there loses the checkpoint)."""
    from lab.training.checkpoint import save_checkpoint

    seen, real = [], os.replace

    def spy(src, dst):  # the listing just before each rename: sidecar's, then checkpoint's
        seen.append((os.path.basename(dst), _checkpoints(tmp_path), sorted(os.listdir(tmp_path))))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    save_checkpoint(str(tmp_path), 20, {"x": 1}, keep=2)
    name, counted, listed = seen[-1]
    assert name == "ckpt_0000020.pt" and "ckpt_0000020.pt.json" in listed and counted == []
    assert _checkpoints(tmp_path) == ["ckpt_0000020.pt"]


@pytest.mark.slow
def test_driver_killed_mid_sweep_resumes_with_nothing_duplicated(cluster, tmp_path, one_thread):
    from lab.training.train import train

    c, _ = cluster
    spec = tmp_path / "two.toml"
    spec.write_text(
        '[[group]]\npresets = ["tiny"]\nseeds = [0, 1]\n'
        "overrides = { steps = 600, ckpt_every = 20, eval_every = 200 }\n"
    )  # 600 steps: the task must outlive the 0.2 s poll and its driver's kill; with 12 (every 2)
    # the ten steps after the first checkpoint are ≈ 0.03 s at a fast CPU's 3 ms a step
    runs, store = tmp_path / "runs", tmp_path / "ray.db"
    address = c.address  # HOST:PORT of the running cluster
    p = _sweep_cli(spec, runs, store, address)
    journal = runs / "tiny-s0" / "store-journal.jsonl"
    # the first checkpoint comes ≈ 100 s in beside a training on 2 cores (Ray's workers import
    # torch and prepare the corpus first; measured 2026-12-05): 240 s is a hang guard, not a pace
    deadline = time.time() + 240
    while time.time() < deadline and p.poll() is None and not _checkpoints(runs / "tiny-s0"):
        time.sleep(0.2)  # kill it once the first run has a checkpoint
    assert p.poll() is None, p.communicate()
    assert _checkpoints(runs / "tiny-s0"), "no checkpoint of tiny-s0 within 240 s"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert journal.exists(), journal
    assert not finished(read_journal(str(journal))), "tiny-s0 ended before its driver's kill"
    p = _sweep_cli(spec, runs, store, address)
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err.decode()
    assert "tiny-s0" in out.decode() and "trained" in out.decode()
    # the resumed runs equal uninterrupted local runs, each number once
    from fiblab.cluster.sweepspec import load_spec, sweep_configs

    local_store = str(tmp_path / "local.db")
    for cfg in sweep_configs(load_spec(str(spec)), str(tmp_path / "local")):
        train(cfg, store_path=local_store, quiet=True)
        assert _numbers(str(store), cfg.name) == _numbers(local_store, cfg.name)
    with Store(str(store)) as st:
        ev = st.events("tiny-s0")["kind"].tolist()
        assert ev[0] == "start", ev
        # the second attempt resumed (else the task finished before its driver's kill reached it)
        assert "resume" in ev, ("tiny-s0 was never resumed: it ended before the kill", ev)
        assert sorted(st.runs()["name"]) == ["tiny-s0", "tiny-s1"]
    p = _sweep_cli(spec, runs, store, address)
    out, _ = p.communicate(timeout=120)
    assert out.decode().count("skipped") == 2
    with Store(str(store)) as st:
        assert st.events("tiny-s0")["kind"].tolist() == ev


def test_bad_ray_input_is_one_line(tmp_path, capsys):
    from fiblab.cli import main

    out = str(tmp_path / "grid" / "p.jsonl")
    for argv, msg in (
        (["sweep", "sweeps/cpu-matrix.toml", "--ray", "nowhere"], "is not a Ray address"),
        (["sweep", str(tmp_path / "none.toml")], "does not exist"),
        (
            ["probe", "marked", "--ray", "local", "--jobs", "2", "--out", out, "--store", ""],
            "--jobs",
        ),
    ):
        assert main(argv) == 2, argv
        said = capsys.readouterr()
        assert msg in said.err and said.err.count("\n") == 1, said.err
        assert said.out == ""  # refused before a step is timed for the start estimate
    assert not (tmp_path / "grid").exists()  # and before anything is written
    spec = tmp_path / "s.toml"
    spec.write_text('[[group]]\npresets = ["tiny"]\nseeds = [0, 0]\n')
    with pytest.raises(ValueError, match="already in an earlier group"):
        from fiblab.cluster.sweepspec import load_spec, sweep_configs

        sweep_configs(load_spec(str(spec)), "runs")
    cfgs = sweep_configs(
        {"group": [{"presets": ["cpu-stagger"], "seeds": [3], "overrides": {"steps": 7}}]}, "r"
    )
    assert [(c.name, c.seed, c.steps, c.run_dir) for c in cfgs] == [("cpu-stagger-s3", 3, 7, "r")]
    paper = sweep_configs(load_spec("sweeps/paper-matrix.toml"), "runs")
    assert len(paper) == 30 and len({c.name for c in paper}) == 30
    assert sorted(c.seed for c in paper).count(42) == 21
    assert json.dumps(cfgs[0].to_dict())  # a config a task can carry


def test_a_ray_process_imports_no_iri_grammar():
    """Every Ray process (the raylet's agents, each worker) imports jsonschema; from 4.25 that
    import builds rfc3987-syntax's Earley parsers (2–3 s of CPU here), and under load the
    dashboard agent then misses the raylet's fixed 15 s wait for its port files: the node dies
    at start-up (ray#65983). pyproject's notebooks extra bounds jsonschema below 4.25; this
    fails when an upgrade brings the eager import back."""
    probe = "import sys, ray; print(sorted(m for m in sys.modules if m.startswith('rfc3987')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_two_processes_preparing_one_cache_entry_take_turns(tmp_path):
    """The runs of a sweep start at once and share the token cache: both get the same entry,
    built once (before the lock, the second cleared the first one's files mid-way)."""
    code = (
        "import sys; from lab.data.prepared import prepare; "
        "d = prepare('bible', vocab_size=300, cache_dir=sys.argv[1], val_tokens=2048); "
        "print(d.reused, len(d.train))"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    lines = sorted(o.split()[0] for o, _ in outs)
    assert lines == ["False", "True"]  # one built it, the other waited and reused it
    assert len({o.split()[1] for o, _ in outs}) == 1


def _running_in(store: str) -> set[str]:
    """The runs whose metrics the store already has."""
    if not os.path.exists(store):
        return set()
    with Store(store) as st:
        return set(st.metrics()["run"])


def _join_while_training(t, cfgs, quiet_s: float = 180.0, limit_s: float = 1200.0) -> None:
    """Wait for the sweep's thread while its runs train: a hang guard (no journal line for
    ``quiet_s``), not a pace.  After the node is removed the head's one CPU trains both runs'
    ≈ 1900 steps one after the other; at a loaded machine's pace that passed a fixed 300 s
    guard while every journal still grew (two flake-check repetitions, 2026-12-06)."""
    from fiblab.cluster.ray_run import journal_path

    start = seen = time.time()
    last = -1
    while t.is_alive():
        lines = sum(len(read_journal(journal_path(cfg))) for cfg in cfgs)
        if lines != last:
            last, seen = lines, time.time()
        assert time.time() - seen < quiet_s, f"no run wrote a journal line in {quiet_s:.0f} s"
        assert time.time() - start < limit_s, f"the sweep still trains after {limit_s:.0f} s"
        t.join(timeout=2)


@pytest.mark.slow
def test_a_worker_node_removed_mid_sweep_is_retried_from_its_checkpoint(
    cluster, tmp_path, one_thread
):
    """Both runs start at once, one on each 1-CPU node; the worker node is removed once both
    have a checkpoint; Ray retries the lost task on the head, which resumes it (last in the
    file: the fixture's worker node is replaced at the end)."""
    import threading

    from fiblab.cluster.ray_run import run_sweep
    from lab.training.train import train

    c, worker = cluster
    # 2000 steps: under load one task may start ≈ 30 s after the other (its worker imports
    # torch first); with 40 the early run had finished before the node went (seen 2026-12-05),
    # and nothing was left to retry; 150 are ≈ 0.5 s at a fast CPU's 3 ms a step, inside the
    # driver's 2 s journal drain that the wait below needs (2000: ≈ 6 s)
    cfgs = _configs(tmp_path / "ray", steps=2000, every=100)
    store = str(tmp_path / "ray.db")
    done: dict = {}
    t = threading.Thread(target=lambda: done.update(r=run_sweep(cfgs, store, progress=False)))
    t.start()
    deadline = time.time() + 240  # a hang guard, not a pace
    folders = [tmp_path / "ray" / cfg.name for cfg in cfgs]
    while time.time() < deadline and t.is_alive() and not all(map(_checkpoints, folders)):
        time.sleep(0.2)
    assert t.is_alive(), "the sweep ended before both runs had a checkpoint"
    while time.time() < deadline and t.is_alive() and len(_running_in(store)) < 2:
        time.sleep(0.5)  # the driver follows the journals: the store shows the runs training
    assert _running_in(store) == {cfg.name for cfg in cfgs} or not t.is_alive()
    from fiblab.cluster.ray_run import journal_path

    unfinished = [not finished(read_journal(journal_path(cfg))) for cfg in cfgs]
    lost = [len(_checkpoints(f)) for f in folders]
    c.remove_node(worker, allow_graceful=False)
    assert all(unfinished), "a run finished before the node was removed: nothing to retry"
    _join_while_training(t, cfgs)
    assert [r.outcome for r in done["r"]] == ["trained", "trained"]
    local_store = str(tmp_path / "local.db")
    resumed = []
    for cfg in _configs(tmp_path / "local", steps=2000, every=100):
        train(cfg, store_path=local_store, quiet=True)
        assert _numbers(store, cfg.name) == _numbers(local_store, cfg.name)
        with Store(store) as st:
            kinds = st.events(cfg.name)["kind"].tolist()
        assert kinds[0] == "start" and kinds.count("start") == 1, kinds
        resumed += [cfg.name] if "resume" in kinds else []
    assert len(resumed) == 1, (resumed, lost)  # the run on the removed node, from its ckpt
    cluster_node = c.add_node(num_cpus=1)  # the fixture's shape again, for any later test
    c.wait_for_nodes()
    assert cluster_node is not None


def test_a_launched_grid_can_target_a_cluster(tmp_path):
    """The notebooks' launcher (`fiblab.jobs.probe_launch`, notebook 02) passes GridSpec.ray on as
    --ray; the address changes no result, so the same grid on Ray is the same grid."""
    from fiblab.cli.parser import build_parser
    from fiblab.jobs import probe_launch as PL
    from probes.gridspec import GridSpec

    spec = GridSpec(scale="tiny", depths=(2,), seeds=(0,), ray="local")
    cmd = PL.grid_command(spec, "o.jsonl", "d")
    assert cmd[cmd.index("--ray") + 1] == "local" and "--jobs" not in cmd
    args = build_parser().parse_args(cmd[3:])
    assert args.ray == "local" and args.jobs == 1 and args.live == "d"
    assert "--ray" not in PL.grid_command(replace(spec, ray=None), "o", "d")
    meta = {"spec": replace(spec, ray=None, jobs=2).to_dict()}
    assert PL.same_grid(meta, spec) and not PL.same_grid(meta, replace(spec, seeds=(1,)))
    with pytest.raises(ValueError, match="give one"):
        replace(spec, jobs=2).cells()


def test_the_probe_form_targets_a_cluster():
    """Notebook 02's form: a Ray address goes into the spec (jobs then 1); a bad one is the
    CLI's one-line error."""
    pytest.importorskip("ipywidgets")
    from fiblab.ui.probe_form import ProbeForm

    f = ProbeForm()
    f.jobs.value = 2
    assert f.spec().ray is None and f.spec().jobs == 2
    f.ray.value = " auto "
    assert f.spec().ray == "auto" and f.spec().jobs == 1
    f.ray.value = "nowhere"
    with pytest.raises(ValueError, match="is not a Ray address"):
        f.spec()


def test_a_sweep_run_taken_by_another_config_is_refused_before_anything(tmp_path, capsys):
    """Done in the store (or with a run folder) under the spec's name but with another config:
    exit 2, one line naming the run and the fix, and no folder, store row or event written."""
    import json

    from fiblab.cli import main
    from lab.training.trainconfig import make_config

    spec = tmp_path / "s.toml"
    spec.write_text('[[group]]\npresets = ["tiny"]\nseeds = [0]\noverrides = { steps = 5 }\n')
    runs, store = tmp_path / "runs", str(tmp_path / "s.db")
    old = make_config("tiny", {"steps": 9, "seed": 0, "name": "tiny-s0", "run_dir": "elsewhere"})
    with Store(store) as st:
        st.start_run("tiny-s0", old.to_dict(), kind="lm", seed=0)
        st.set_status("tiny-s0", "done")
        before = (len(st.events()), st.runs().to_dict())
    argv = ["sweep", str(spec), "--runs", str(runs), "--store", store, "--ray", "local"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'tiny-s0'" in err and "steps=9 there, steps=5 now" in err
    assert "new name" in err and "--store" in err
    assert not runs.exists()
    with Store(store) as st:
        assert (len(st.events()), st.runs().to_dict()) == before
    # the same config done in the store is still skipped (no Ray needed to know it)
    same = make_config("tiny", {"steps": 5, "seed": 0, "name": "tiny-s0", "run_dir": str(runs)})
    from fiblab.cluster.ray_run import config_clash

    assert config_clash({**same.to_dict(), "run_dir": "other", "micro_batch": 1}, same) is None
    # a run folder of another config (its checkpoints would be resumed): refused as well
    os.makedirs(runs / "tiny-s0")
    (runs / "tiny-s0" / "config.json").write_text(json.dumps(old.to_dict()))
    assert main(["sweep", str(spec), "--runs", str(runs), "--store", "", "--ray", "local"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run folder" in err and "--runs" in err
    assert os.listdir(runs / "tiny-s0") == ["config.json"]


def test_a_ray_grid_eta_shares_the_work_over_the_cluster_lanes():
    """fiblab.jobs.probe_launch's ETA with GridSpec.ray: the lanes the grid process found (its
    progress.json), none before it says so.  By hand: rate 0.1 s a step at depth 2 = 0.05 s a
    layer-step; work left 10 steps × depth 2 running + 20 steps × depth 2 × 2 pending = 100
    layer-steps = 5 s, over min(2 lanes, 3 cells) = 2.5 s (one at a time it would be 5 s)."""
    import math

    from fiblab.jobs.probe_launch import grid_lanes
    from fiblab.jobs.probe_progress import eta_seconds

    running, pending = [(2, 10, 20, 0.1)], [2, 2]
    assert grid_lanes({"ray": "auto", "jobs": 1}, {}) is None
    assert grid_lanes({"ray": "auto", "jobs": 1}, {"lanes": None}) is None
    assert grid_lanes({"ray": None, "jobs": 3}, {"lanes": 8}) == 3  # here: its own jobs
    lanes = grid_lanes({"ray": "auto", "jobs": 1}, {"lanes": 2})
    assert eta_seconds(pending, running, 20, lanes) == pytest.approx(2.5)
    assert eta_seconds(pending, running, 20, 1) == pytest.approx(5.0)
    assert math.isnan(eta_seconds(pending, [(2, 0, 20, None)], 20, 2))


def test_train_on_ray_is_launchable_and_the_form_targets_a_cluster(tmp_path, capsys):
    """Notebook 03's launcher and form pass a Ray address on as ``fiblab train --ray``; empty:
    today's command; a bad one is refused before anything starts."""
    from fiblab.cli import main
    from fiblab.cli.parser import build_parser
    from fiblab.jobs import launch as LA
    from fiblab.jobs.train_process import train_command

    cmd = train_command("tiny", store="s.db", runs_dir="r", ray="10.0.0.5:6379")
    args = build_parser().parse_args(cmd[3:])
    assert args.ray == "10.0.0.5:6379" and args.ray_threads == 1 and cmd[2] == "fiblab.cli"
    assert "--ray" not in train_command("tiny", store="s.db", runs_dir="r")
    with pytest.raises(ValueError, match="give one"):
        train_command("tiny", nproc=2, ray="auto")
    with pytest.raises(ValueError, match="is not a Ray address"):
        LA.launch("tiny", ray="nowhere", runs_dir=str(tmp_path), store="")
    assert not os.listdir(tmp_path)
    for argv, msg in (
        (["train", "--preset", "tiny", "--ray", "nowhere", "--store", ""], "is not a Ray address"),
        (
            ["train", "--preset", "tiny", "--ray", "local", "--restart", "--store", ""],
            "--restart",
        ),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1, err
    pytest.importorskip("ipywidgets")
    from fiblab.ui.train import TrainPanel
    from fiblab.ui.train_form import form_values

    p = TrainPanel(runs=str(tmp_path), store="", auto_refresh=False)
    assert p.ray_address() is None
    p.ray.value = " auto "
    assert p.ray_address() == "auto"
    p.ray.value = "nowhere"
    with pytest.raises(ValueError, match="is not a Ray address"):
        p.launch()
    assert not os.listdir(tmp_path)
    h = LA.RunHandle(
        name="r",
        preset="tiny",
        run_dir="d",
        runs_dir="rd",
        store="",
        pid=1,
        command=[],
        steps=4,
        tokens_per_step=1,
        learned=False,
        spec={"ray": "auto"},
    )
    assert form_values(h)["ray"] == "auto"
    assert form_values(replace(h, spec={"preset": "tiny"}))["ray"] == ""


@pytest.mark.slow
def test_a_launched_run_on_ray_stops_by_request_and_resumes(cluster, tmp_path):
    """`fiblab.jobs.launch` with ray=HOST:PORT (the module's cluster): the run trains as a task, a
    stop request in its folder reaches the task (checkpoint kept, state stopped), and resume
    continues it on the cluster to the end, each step's loss in the store once."""
    from fiblab.jobs import launch as LA

    c, _ = cluster
    store, runs = str(tmp_path / "s.db"), str(tmp_path / "runs")
    # 2000 steps: on a quiet machine 60 tiny steps ended before the stop (the driver sees the
    # task's steps every 2 s) and the run was "done" (2 of 2 flake-check runs, 2026-12-05); 600
    # are ≈ 2 s on a CPU with a 3 ms tiny step, one refresh
    steps, over = 2000, {"ckpt_every": 50, "eval_every": 1000}
    env = {"PYTHONPATH": os.getcwd()}
    h = LA.launch(
        "tiny", name="r", steps=steps, overrides=over, store=store, runs_dir=runs, env=env,
        ray=c.address,
    )  # fmt: skip
    assert h.command[h.command.index("--ray") + 1] == c.address and h.spec["ray"] == c.address
    # a hang guard, not a pace: beside two other jobs on 2 cores the task took 3.5 min to
    # start (flake check, 2026-12-06; a 180 s guard failed once), and a stop asked at step 0
    # would read as a lost step, so the stop waits for step 2 however long the start takes
    deadline = time.time() + 600
    while time.time() < deadline and h.is_alive() and LA.snapshot(h)["step"] < 2:
        time.sleep(0.5)  # the driver follows the task's journal: the store shows its steps
    assert h.is_alive(), h.log_tail()
    assert LA.snapshot(h)["step"] >= 2, f"no step 2 within 600 s: {h.log_tail()}"
    LA.request_stop(h)
    assert LA.wait(h, timeout=180) == "stopped", h.log_tail()
    s = LA.snapshot(h)
    assert 2 <= s["step"] < steps and _checkpoints(tmp_path / "runs" / "r")
    # the step it says it stopped at is its stop's checkpoint (the task's answer reaches the
    # driver's message, not "stopped at step None")
    last = max(int(n.split("_")[1].split(".")[0]) for n in _checkpoints(tmp_path / "runs" / "r"))
    assert f"stopped at step {last} by request" in h.log_tail()
    h2 = LA.resume(h)
    assert "--resume" in h2.command and h2.spec["ray"] == c.address
    assert LA.wait(h2, timeout=480) == "done", h2.log_tail()  # a hang guard: 2000 steps
    with Store(store) as st:
        loss = st.metrics("r", names=["loss"])
        kinds = st.events("r")["kind"].tolist()
    assert sorted(loss["step"]) == list(range(1, steps + 1))  # every step once
    assert kinds.count("start") == 1 and "resume" in kinds and "stopped" in kinds


@pytest.mark.slow
def test_the_gpu_checks_tiny_ray_sweep_compares_on_the_cpu(cluster, tmp_path, one_thread):
    """benchmarks/gpu_check.py's ``ray`` section runs on CUDA only; its sweep and comparison,
    on this cluster's CPUs: bit-equal to the runs here (CPU kernels are deterministic)."""
    import math

    from benchmarks.gpu.ray_sweep import compare, tiny_sweep

    rec = tiny_sweep(str(tmp_path), gpus=False)
    assert rec["ok"] and [r["outcome"] for r in rec["runs"]] == ["trained", "trained"]
    assert all(r["exact"] and r["rel_err"] == 0.0 for r in rec["runs"]), rec
    assert compare({"x": 1.0}, {"x": 1.25}) == (pytest.approx(0.2), False)
    assert compare({"x": 1.0}, {"y": 1.0})[0] == math.inf


def test_connect_keeps_a_sigterm_handler_its_caller_put_in(monkeypatch):
    """`ray.init` puts in its own SIGTERM handler (an immediate ``sys.exit``, ray's
    `_private/worker.py`), over the probe grid's, which writes how the grid ended: a grid
    terminated in its Ray work or while it served a stop read "failed" with no end.  `connect`
    puts the caller's handler back; where there was none (the default), Ray's stays.  A
    stand-in ``ray`` module does what ``ray.init`` does to the handler."""
    import signal
    import sys
    import types

    from fiblab.cluster import ray_cluster

    def rays(signum, frame):
        sys.exit(signum)

    fake = types.SimpleNamespace(
        is_initialized=lambda: False,
        init=lambda **kw: signal.signal(signal.SIGTERM, rays),
        shutdown=lambda: None,
    )
    monkeypatch.setattr(ray_cluster, "import_ray", lambda: fake)

    def grids(signum, frame):
        raise SystemExit(128 + signum)

    before = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, grids)
        with ray_cluster.connect("local", num_cpus=1):
            assert signal.getsignal(signal.SIGTERM) is grids
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with ray_cluster.connect("local", num_cpus=1):
            assert signal.getsignal(signal.SIGTERM) is rays
    finally:
        signal.signal(signal.SIGTERM, before)
