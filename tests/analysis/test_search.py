"""The schedule search (analysis.experiments.search.search*, `fiblab search`): spaces, proxies, the Optuna study and
the store agreeing on every trial, the winners' re-run, and one-line errors."""

from __future__ import annotations

import json
import math
import os

import pytest

from analysis.experiments.search.objectives import (
    ProbeSpec,
    Pruned,
    TrialTask,
    evaluate,
    layers_to_reach,
    parse_objectives,
)
from analysis.experiments.search.report import compare, rerun, winners
from analysis.experiments.search.search import SearchConfig, run_search, trial_run_name
from analysis.experiments.search.space import coprime_strides, parse_space
from fiblab.cli import main
from lab.store import Store

optuna = pytest.importorskip("optuna")

FIB15 = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987]


def union_by_hand(alphas, window=8, seq_len=1024, base=FIB15):
    """Distinct distances of a stack, counted from the definition: the window 0..W and every
    rung round(α·f) (half-to-even) below T, per layer, merged."""
    out = set(range(window + 1))
    for a in alphas:
        out |= {round(a * f) for f in base if round(a * f) <= seq_len - 1}
    return len(out)


STAGGER16 = [0.5 + ell / 15 for ell in range(16)]  # 0.5 → 1.5 over 16 layers, by hand


def test_stagger_proxy_matches_a_hand_count():
    assert union_by_hand(STAGGER16) == 133  # the paper convention's number (SPEC §9)
    space = parse_space("linear")
    task = TrialTask(space, {"alpha_first": 0.5, "alpha_last": 1.5}, ("distinct", "reach"))
    got = evaluate(task)
    assert got["distinct"] == union_by_hand(STAGGER16)
    fixed = TrialTask(space, {"alpha_first": 1.0, "alpha_last": 1.0}, ("distinct",))
    assert evaluate(fixed)["distinct"] == union_by_hand([1.0] * 16) == 19


def test_layers_to_reach_counts_the_first_full_layer():
    assert layers_to_reach([0.1, 0.9, 1.0, 1.0]) == 3
    assert layers_to_reach([0.1, 0.5]) == 3  # never: L + 1
    # window 0..1 and rung 1 only: distance δ needs δ hops of 1 → T=4 needs 3 layers
    sp = parse_space("linear", layers=4, window=1, rungs=1, seq_len=4)
    got = evaluate(TrialTask(sp, {"alpha_first": 1.0, "alpha_last": 1.0}, ("reach",)))
    assert got["reach"] == 3


def test_spaces_decode_to_per_layer_alphas():
    assert coprime_strides(16) == (1, 3, 5, 7, 9, 11, 13, 15)
    assert coprime_strides(6) == (1, 5)
    lin = parse_space("linear", layers=3).decode({"alpha_first": 1.5, "alpha_last": 0.5})
    assert lin.alphas == (1.5, 1.0, 0.5)
    cop = parse_space("coprime", layers=8).decode({"stride": 3})
    ramp = [0.5 + ell / 7 for ell in range(8)]
    assert cop.alphas == pytest.approx([ramp[(3 * ell) % 8] for ell in range(8)])
    free = parse_space("free+base+window", layers=2).decode(
        {"alpha_0": 0.7, "alpha_1": 1.2, "base": "pow2", "window": 3}
    )
    assert (free.alphas, free.base, free.window) == ((0.7, 1.2), "pow2", 3)
    names = [p.name for p in parse_space("free+window", layers=3).params()]
    assert names == ["alpha_0", "alpha_1", "alpha_2", "window"]


@pytest.mark.parametrize("bad", ["", "bogus", "linear+free", "linear+linear", "base+nope"])
def test_bad_space_is_a_value_error(bad):
    with pytest.raises(ValueError, match="search space"):
        parse_space(bad)


def test_bad_objective_is_a_value_error():
    with pytest.raises(ValueError, match="objective nope is unknown"):
        parse_objectives(["distinct", "nope"])
    with pytest.raises(ValueError, match="repeat"):
        parse_objectives(["band,band"])


TRIALS = 25  # the stated budget: a seeded TPE search of the linear ramp needs at most this many


@pytest.mark.parametrize("space", ["linear", "free"])
def test_seeded_search_matches_or_beats_the_stagger(space, tmp_path):
    cfg = SearchConfig(parse_space(space), parse_objectives(["distinct"]), trials=TRIALS, seed=0)
    res = run_search(cfg)
    assert len(res.study.trials) == TRIALS
    best = res.study.best_value
    assert best >= union_by_hand(STAGGER16)
    # the best trial's α really give that count (recounted by hand, not by the lab)
    alphas = cfg.space.decode(res.study.best_trial.params).alphas
    assert union_by_hand(alphas) == best


def _store_agrees(study, store, study_name):
    runs = store.runs(kind="search")
    ours = runs[runs["name"].str.startswith(f"search/{study_name}/t")]
    assert len(ours) == len(study.trials)
    metrics = store.metrics(list(ours["name"]))
    for t in study.trials:
        name = trial_run_name(study_name, t.number)
        row = ours[ours["name"] == name].iloc[0]
        cfg = json.loads(row["config_json"])
        assert cfg["trial"] == t.number and cfg["params"] == t.params
        state = {"COMPLETE": "done", "PRUNED": "stopped", "FAIL": "failed"}[t.state.name]
        assert row["status"] == state
        m = metrics[metrics["run"] == name].set_index("name")["value"]
        if t.state.name == "COMPLETE":
            assert [m[f"search/{n}"] for n in cfg["objectives"]] == list(t.values)
        alphas = store.alphas(name)
        if t.state.name == "COMPLETE":
            assert list(alphas.sort_values("layer")["alpha"]) == pytest.approx(cfg["alphas"])


def test_study_and_store_agree_and_a_rerun_resumes(tmp_path):
    url = f"sqlite:///{tmp_path / 'search.db'}"
    space = parse_space("free+window", layers=8, window=4, rungs=12, seq_len=256, max_window=8)
    objectives = parse_objectives(["distinct", "reach"])  # two: NSGA-II, a Pareto front
    with Store(tmp_path / "fiblab.db") as store:
        cfg = SearchConfig(space, objectives, trials=12, seed=3, storage=url)
        first = run_search(cfg, store=store)
        again = run_search(SearchConfig(space, objectives, trials=18, seed=3, storage=url), store)
        assert again.study_name == first.study_name
        assert [trial_run_name(first.study_name, n) for n in range(12, 18)] == again.run_names
        study = optuna.load_study(study_name=first.study_name, storage=url)
        assert len(study.trials) == 18
        _store_agrees(study, store, first.study_name)
        # the front is what a brute-force dominance check over all trials keeps
        done = [t for t in study.trials if t.state.name == "COMPLETE"]

        def dominated(a):
            return any(
                b.values[0] >= a.values[0]
                and b.values[1] <= a.values[1]
                and tuple(b.values) != tuple(a.values)
                for b in done
            )

        front = {t.number for t in done if not dominated(t)}
        assert {t.number for t in study.best_trials} == front
        assert {t.number for t in winners(study, objectives, top=99)} == front


def test_winners_rerun_beside_stagger_and_coprime(tmp_path):
    cfg = SearchConfig(parse_space("linear"), parse_objectives(["distinct"]), trials=12, seed=0)
    res = run_search(cfg)
    with Store(tmp_path / "fiblab.db") as store:
        rows = rerun(cfg, res, store=store, top=2)
        assert [r["label"] for r in rows][-2:] == ["stagger", "coprime"]
        by = {r["label"]: r for r in rows}
        assert by["stagger"]["distinct"] == union_by_hand(STAGGER16)
        coprime16 = [STAGGER16[(7 * ell) % 16] for ell in range(16)]  # S=7 at L=16
        assert by["coprime"]["alphas"] == pytest.approx(coprime16)
        assert by["coprime"]["distinct"] == union_by_hand(coprime16)
        best = winners(res.study, cfg.objectives, top=1)[0]
        assert rows[0]["distinct"] == best.values[0]  # a counting proxy: the same value again
        assert len(store.runs(kind="search-rerun")) == len(rows)
    lines = {(x["label"], x["objective"]): x for x in compare(rows, cfg)}
    assert lines[("stagger", "distinct")]["gap_vs_stagger"] == 0
    g = lines[(rows[0]["label"], "distinct")]["gap_vs_stagger"]
    assert g == rows[0]["distinct"] - union_by_hand(STAGGER16)
    assert math.isnan(lines[(rows[0]["label"], "distinct")]["welch_p"])  # one value: no test


def test_probe_objective_prunes_and_is_stored(tmp_path):
    space = parse_space("linear", layers=2, window=2, rungs=6, seq_len=48)
    spec = ProbeSpec(steps=30, d_model=32)
    task = TrialTask(space, {"alpha_first": 0.5, "alpha_last": 1.5}, ("probe",), probe=spec)
    seen = []

    def report(step, value):
        seen.append((step, value))
        return True

    with pytest.raises(Pruned):
        evaluate(task, report)
    assert seen and seen[0][0] == 1 and seen[0][1] < 0  # −loss, after the first step
    cfg = SearchConfig(space, parse_objectives(["probe"]), trials=2, seed=0, probe=spec)
    with Store(tmp_path / "fiblab.db") as store:
        res = run_search(cfg, store=store)
        for t in res.study.trials:
            assert 0.0 <= t.values[0] <= 1.0
        _store_agrees(res.study, store, res.study_name)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["search", "bogus"], "search space 'bogus' is unknown"),
        (["search", "linear", "--objective", "nope"], "objective nope is unknown"),
        (["search", "linear+free"], "at most one of"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(argv, says, tmp_path, capsys):
    rc = main(argv + ["--store", str(tmp_path / "s.db"), "--storage", ""])
    err = capsys.readouterr().err
    assert rc == 2
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_search_writes_the_store(tmp_path, capsys):
    db = tmp_path / "s.db"
    url = f"sqlite:///{tmp_path / 'o.db'}"
    argv = ["search", "linear", "--trials", "6", "--storage", url, "--store", str(db), "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "stagger" in out and "coprime" in out and "gap vs stagger" in out
    with Store(db) as store:
        name = store.config(store.runs(kind="search")["name"].iloc[0])["study"]
        _store_agrees(optuna.load_study(study_name=name, storage=url), store, name)


def test_ppl_objective_is_seeded_and_stored(tmp_path):
    from analysis.experiments.search.objectives import LMSpec

    space = parse_space("linear", layers=2, window=2, rungs=8, seq_len=64)
    cfg = SearchConfig(space, parse_objectives(["ppl"]), trials=1, seed=5, lm=LMSpec(steps=3))
    with Store(tmp_path / "fiblab.db") as store:
        res = run_search(cfg, store=store)
        _store_agrees(res.study, store, res.study_name)
        assert {r for r in store.runs()["name"]} == {trial_run_name(res.study_name, 0)}
    t = res.study.trials[0]
    assert 1.0 < t.values[0] < 4 * 512  # a perplexity, below a few times the vocabulary
    again = evaluate(cfg.task(t.params))  # the same seed: the same number
    assert again["ppl"] == t.values[0]


def test_a_trial_left_running_by_an_ended_search_is_failed_on_resume(tmp_path):
    """A search stopped mid-trial (the notebook's stop kills its process) leaves that trial
    RUNNING; the next driver fails it, in the study and the store, unless its process lives or
    it belongs to another host sharing the study."""
    import socket
    import subprocess
    import sys

    from analysis.experiments.search.search import DRIVER_ATTR
    from lab.machine.procs import start_ticks

    url = f"sqlite:///{tmp_path / 'search.db'}"
    space = parse_space("linear", layers=4)
    objectives = parse_objectives(["distinct"])
    with Store(tmp_path / "fiblab.db") as store:
        first = run_search(SearchConfig(space, objectives, trials=3, storage=url), store)
        study = optuna.load_study(study_name=first.study_name, storage=url)
        ended = subprocess.Popen([sys.executable, "-c", "pass"])
        ended.wait()
        host = socket.gethostname()
        me = os.getpid()
        owners = {
            "ended": f"{host}:{ended.pid}",  # as older searches wrote it: the PID alone
            "elsewhere": "another-host:1",
            "ended before its run": f"{host}:{ended.pid}@{start_ticks(ended.pid)}",
            "alive": f"{host}:{me}@{start_ticks(me)}",  # this very process
            "reused PID": f"{host}:{me}@{start_ticks(me) + 1}",  # this PID, another process
        }
        numbers = {}
        for who, owner in owners.items():
            t = study.ask()
            t.set_user_attr(DRIVER_ATTR, owner)
            numbers[who] = t.number
            if who not in ("ended before its run", "alive", "reused PID"):  # killed before
                store.start_run(trial_run_name(first.study_name, t.number), {}, kind="search")
        run_search(SearchConfig(space, objectives, trials=5, storage=url), store)
        states = {t.number: t.state.name for t in study.get_trials()}
        assert states[numbers["ended"]] == "FAIL"
        assert states[numbers["ended before its run"]] == "FAIL"
        assert states[numbers["elsewhere"]] == "RUNNING"
        assert states[numbers["alive"]] == "RUNNING"
        assert states[numbers["reused PID"]] == "FAIL"
        assert sum(s == "COMPLETE" for s in states.values()) == 5
        assert trial_run_name(first.study_name, numbers["ended before its run"]) not in set(
            store.runs()["name"]
        )
        runs = store.runs().set_index("name")
        assert runs.loc[trial_run_name(first.study_name, numbers["ended"]), "status"] == "failed"
        assert runs.loc[trial_run_name(first.study_name, numbers["elsewhere"]), "status"] == (
            "running"
        )


@pytest.mark.parametrize("outcome", ["values", "pruned", "error"])
def test_a_trial_is_recorded_in_the_store_before_the_study(outcome):
    """A search process killed between the two writes must not leave a trial complete in the
    study and "running" in the store (the panel's stopped search showed one): the store is
    written first, so the study's trial is still RUNNING and `fail_abandoned` settles both.
    Oracle: the order of the calls, recorded."""
    from analysis.experiments.search.objectives import Pruned
    from analysis.experiments.search.search import record_trial

    calls = []

    class Rec:
        def __getattr__(self, name):
            return lambda *a, **k: calls.append((type(self).__name__, name))

    class Study(Rec):
        pass

    class StoreRec(Rec):
        pass

    space = parse_space("linear", layers=4)
    cfg = SearchConfig(space, parse_objectives(["distinct"]))
    task = TrialTask(space, {"alpha_first": 0.5, "alpha_last": 1.5}, ("distinct",))
    res = {"values": {"distinct": 7.0}, "pruned": Pruned("early"), "error": RuntimeError("x")}
    record_trial(Study(), 3, task, "search/s/3", res[outcome], cfg, StoreRec())
    assert calls[-1] == ("Study", "tell") and {c for c, _ in calls[:-1]} == {"StoreRec"}
