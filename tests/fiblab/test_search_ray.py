"""The schedule search on Ray (fiblab.cluster.ray_search, `fiblab search --ray`) against a real two-node
cluster on this machine (Ray's `ray.cluster_utils.Cluster`, a head and a worker of 1 CPU each).

The oracles: a hand count of the distinct distances (the window 0..W and every rung round(α·f)
below T, per layer, merged) for every trial's parameters; the Optuna study read back from its
SQLite file beside the store's runs; the stagger's 133 distances (L=16, W=8, K=15, T=1024).
"""

from __future__ import annotations

import json
import os

import pytest
from ray_support import two_node_cluster

ray = pytest.importorskip("ray")
optuna = pytest.importorskip("optuna")
# ≈ 35 s (a two-node cluster); test_ray_sweep keeps Ray in the default suite
pytestmark = pytest.mark.slow

from analysis.experiments.search.objectives import evaluate, parse_objectives  # noqa: E402
from analysis.experiments.search.search import SearchConfig, trial_run_name  # noqa: E402
from analysis.experiments.search.space import parse_space  # noqa: E402
from fiblab.cli import main  # noqa: E402
from lab.store import Store  # noqa: E402

FIB15 = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987]
STAGGER16 = [0.5 + ell / 15 for ell in range(16)]


def count_by_hand(alphas, window=8, seq_len=1024, base=FIB15):
    out = set(range(window + 1))
    for a in alphas:
        out |= {round(a * f) for f in base if round(a * f) <= seq_len - 1}
    return len(out)


def linear_alphas(first, last, layers=16):
    return [first + (last - first) * ell / (layers - 1) for ell in range(layers)]


@pytest.fixture(scope="module")
def cluster():
    for c, _worker in two_node_cluster():
        yield c


def study_and_store_agree(study, store, study_name):
    """Every trial of the study is one run of the store with its parameters, state and values."""
    runs = store.runs(kind="search")
    ours = runs[runs["name"].str.startswith(f"search/{study_name}/t")]
    assert sorted(ours["name"]) == sorted(
        trial_run_name(study_name, t.number) for t in study.trials
    )
    metrics = store.metrics(list(ours["name"]))
    for t in study.trials:
        name = trial_run_name(study_name, t.number)
        row = ours[ours["name"] == name].iloc[0]
        cfg = json.loads(row["config_json"])
        assert cfg["params"] == t.params
        assert row["status"] == {"COMPLETE": "done", "FAIL": "failed"}[t.state.name]
        if t.state.name == "COMPLETE":
            m = metrics[metrics["run"] == name].set_index("name")["value"]
            assert [m["search/distinct"]] == list(t.values)


TRIALS = 25  # as the local search's stated budget (tests/analysis/test_search.py)


def test_search_on_ray_equals_local_values_and_the_store(cluster, tmp_path, monkeypatch):
    from fiblab.cluster.ray_search import RayTrials, cluster_slots, run_search_on_ray

    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    url = f"sqlite:///{tmp_path / 'search.db'}"
    cfg = SearchConfig(
        parse_space("linear"), parse_objectives(["distinct"]), trials=TRIALS, storage=url
    )
    in_flight = []
    submit = RayTrials.submit

    def watch(self, task):  # how many trials were out when each was submitted
        in_flight.append(len(self.pending) + 1)
        return submit(self, task)

    monkeypatch.setattr(RayTrials, "submit", watch)
    with Store(tmp_path / "fiblab.db") as store:
        res = run_search_on_ray(cfg, store, address=cluster.address)
        study = optuna.load_study(study_name=res.study_name, storage=url)
        study_and_store_agree(study, store, res.study_name)
    from fiblab.cluster.ray_cluster import task_resources

    assert cluster_slots(ray, task_resources(ray, 1, False)) == 2  # 2 nodes × 1 CPU
    assert max(in_flight) == 2 and len(in_flight) == TRIALS
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * TRIALS
    assert len(res.run_names) == TRIALS
    for t in study.trials:  # each value: the hand count, and the local evaluate, of its params
        alphas = linear_alphas(t.params["alpha_first"], t.params["alpha_last"])
        assert t.values[0] == count_by_hand(alphas)
        assert t.values[0] == evaluate(cfg.task(t.params))["distinct"]
    assert study.best_value >= count_by_hand(STAGGER16) == 133


def test_worker_faults_fail_one_trial_each_and_the_search_completes(cluster, tmp_path):
    from fiblab.cluster.ray_search import run_search_on_ray

    died = str(tmp_path / "died")

    def flaky(task):  # runs on the workers (a local function: Ray ships it by value)
        if task.params["alpha_first"] < 0.8:
            raise RuntimeError("injected fault")
        try:  # the first task to get here kills its worker process, once
            os.close(os.open(died, os.O_CREAT | os.O_EXCL))
            os._exit(1)
        except FileExistsError:
            pass
        return evaluate(task)

    cfg = SearchConfig(parse_space("linear"), parse_objectives(["distinct"]), trials=8, seed=1)
    lines = []
    with Store(tmp_path / "fiblab.db") as store:
        # retries 0: the killed task is not run again, so its trial is lost
        res = run_search_on_ray(cfg, store, cluster.address, retries=0, fn=flaky, log=lines.append)
        study_and_store_agree(res.study, store, res.study_name)
        states = [t.state.name for t in res.study.trials]
        assert states.count("COMPLETE") == 8
        failed = [t for t in res.study.trials if t.state.name == "FAIL"]
        faults = [t for t in failed if t.params["alpha_first"] < 0.8]
        lost = [t for t in failed if t.params["alpha_first"] >= 0.8]
        assert len(lost) == 1 and len(faults) == len(failed) - 1
        assert all(t.params["alpha_first"] >= 0.8 for t in res.study.trials if t.values)
        runs = store.runs(kind="search").set_index("name")
        for t in faults:
            msg = runs.loc[trial_run_name(res.study_name, t.number), "message"]
            assert msg == "RuntimeError: injected fault"
            assert f"trial {t.number}: RuntimeError: injected fault" in lines
        msg = runs.loc[trial_run_name(res.study_name, lost[0].number), "message"]
        assert msg.startswith("TrialLost: ") and "\n" not in msg
    # retries 1: the killed task runs again and its trial completes
    os.remove(died)
    again = SearchConfig(cfg.space, cfg.objectives, trials=3, seed=2)
    res = run_search_on_ray(again, None, cluster.address, retries=1, fn=flaky)
    assert os.path.exists(died)  # a worker did die
    states = [t.state.name for t in res.study.trials]
    assert states.count("COMPLETE") == 3
    for t in res.study.trials:
        if t.state.name == "FAIL":
            assert t.params["alpha_first"] < 0.8  # only the injected exceptions fail
        else:
            alphas = linear_alphas(t.params["alpha_first"], t.params["alpha_last"])
            assert t.values[0] == count_by_hand(alphas)


def test_cli_search_on_the_cluster_writes_the_store(cluster, tmp_path, capsys):
    db, url = tmp_path / "s.db", f"sqlite:///{tmp_path / 'o.db'}"
    argv = ["search", "linear", "--trials", "4", "--storage", url, "--store", str(db)]
    assert main(argv + ["--ray", cluster.address, "--ray-parallel", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "stagger" in out and "coprime" in out
    with Store(db) as store:
        name = store.config(store.runs(kind="search")["name"].iloc[0])["study"]
        study = optuna.load_study(study_name=name, storage=url)
        assert len(study.trials) == 4
        study_and_store_agree(study, store, name)


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--ray", "nowhere"], "--ray 'nowhere' is not a Ray address"),
        (["--ray", "local", "--jobs", "2"], "--jobs 2 is for trials run here"),
        (["--ray-parallel", "2"], "--ray-parallel 2 needs --ray ADDRESS"),
    ],
)
def test_cli_bad_ray_input_is_one_line_and_exit_2(extra, says, tmp_path, capsys):
    argv = ["search", "linear", "--store", str(tmp_path / "s.db"), "--storage", ""]
    rc = main(argv + extra)
    err = capsys.readouterr().err
    assert rc == 2
    assert says in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "s.db").exists()  # nothing ran


class LastInFirstOut:
    """An executor without Ray (`analysis.experiments.search.search.TrialExecutor`): ``slots`` trials out, the
    newest returned first, so trials are told in another order than they were asked."""

    def __init__(self, slots, bad=False):
        self.slots, self.bad, self.out, self.most, self.n = slots, bad, [], 0, 0

    def submit(self, task):
        self.n += 1
        self.out.append((self.n, task))
        self.most = max(self.most, len(self.out))
        return self.n

    def next_done(self):
        handle, task = self.out.pop()
        return handle, ValueError("bad input") if self.bad else evaluate(task)


def test_an_executor_keeps_its_slots_full_and_each_result_is_told(tmp_path):
    from analysis.experiments.search.search import run_search

    cfg = SearchConfig(parse_space("linear"), parse_objectives(["distinct"]), trials=9)
    ex = LastInFirstOut(3)
    with Store(tmp_path / "fiblab.db") as store:
        res = run_search(cfg, store=store, executor=ex)
        study_and_store_agree(res.study, store, res.study_name)
    assert ex.most == 3 and not ex.out
    told = [int(n.rsplit("t", 1)[1]) for n in res.run_names]
    assert sorted(told) == list(range(9)) and told != sorted(told)
    for t in res.study.trials:
        alphas = linear_alphas(t.params["alpha_first"], t.params["alpha_last"])
        assert t.state.name == "COMPLETE" and t.values[0] == count_by_hand(alphas)
    # bad input stops the search; the trials still out are told FAIL, none left running
    url = f"sqlite:///{tmp_path / 'bad-study.db'}"
    bad = SearchConfig(cfg.space, cfg.objectives, trials=9, storage=url, study_name="bad")
    with Store(tmp_path / "bad.db") as store:
        with pytest.raises(ValueError, match="bad input"):
            run_search(bad, store=store, executor=LastInFirstOut(3, bad=True))
        assert list(store.runs(kind="search")["status"]) == ["failed"] * 3
    study = optuna.load_study(study_name="bad", storage=url)
    assert [t.state.name for t in study.trials] == ["FAIL"] * 3
