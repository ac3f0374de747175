"""TensorBoard: live logging of a tiny training run and of tiny probe cells (two worker
processes), read back with tensorboard's own EventAccumulator and checked against what the store
holds for the same runs (the store is the oracle); `fiblab export-store` of those runs and of the
fixture store gives the same scalars (the fixture's by hand), twice without duplicates; the sink's
fresh / resumed folders; and without --log nothing is written and tensorboard is not imported."""

import dataclasses
import itertools
import json
import math
import os
import sys
import time

import pytest
from fixture_store import write_fixture
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fiblab.cli import main
from lab.data.corpus import bible_documents
from lab.store import Store
from lab.training.sinks import LogSpec, run_folder
from lab.training.tblog import EVENT_PREFIX, TensorBoardSink, wait_to_sort_last
from lab.training.train import train
from lab.training.trainconfig import make_config
from probes.settings import SCALES, Cell

PROBE_STEPS = 30  # tiny scale logs every 25 steps: points at 0, 25 and the last step 30
CELLS = ("uniform", "staggered")


def read_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), …]} of the event files in ``folder`` (TensorBoard's reader)."""
    ea = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    ea.Reload()
    return {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}


def wall_times(folder, tag) -> list[float]:
    ea = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    ea.Reload()
    return [e.wall_time for e in ea.Scalars(tag)]


def assert_same(got: dict, want: dict) -> None:
    """The same tags, the same steps in order, values equal to float32 precision."""
    assert sorted(got) == sorted(want)
    for tag, points in want.items():
        assert [s for s, _ in got[tag]] == [s for s, _ in points], tag
        for (_, g), (_, w) in zip(got[tag], points):
            assert g == pytest.approx(w, rel=1e-6, abs=1e-7), tag


def lm_oracle(store: Store, run: str, seq_len: int, dataset: str = "small") -> dict:
    """What live logging must have written for an LM run, from the store's own rows."""
    want: dict[str, list] = {}
    m = store.metrics(run)
    for name in sorted(set(m["name"])):
        rows = m[m["name"] == name]
        want[name] = list(zip(rows["step"].tolist(), rows["value"].tolist()))
    e = store.evals(run)
    for kind in sorted(set(e["kind"])):
        rows = e[(e["kind"] == kind) & (e["context_len"] == seq_len)]
        want[f"ppl/{dataset}/{kind}"] = list(
            zip(rows["step"].tolist(), rows["perplexity"].tolist())
        )
    a = store.alphas(run)
    for layer in sorted(set(a["layer"])):
        rows = a[a["layer"] == layer]
        want[f"alpha/layer_{layer:02d}"] = list(zip(rows["step"].tolist(), rows["alpha"].tolist()))
    return want


def probe_oracle(store: Store, key: str) -> dict:
    want = lm_oracle(store, key, seq_len=-1)  # loss and α; a probe has no evaluations
    p = store.probes()
    p = p[p["run"] == key]
    for d, acc, steps in zip(p["distance"], p["accuracy"], p["steps"]):
        want[f"acc/{d}"] = [(int(steps), float(acc))]
    return want


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """One tiny LM run and two tiny probe cells (jobs=2), logged live into ``tb``."""
    d = tmp_path_factory.mktemp("tb")
    text = d / "small.txt"  # 60 chapters: tokenised in seconds, enough for the tiny preset
    text.write_text("\n\n".join(itertools.islice(bible_documents(), 60)))
    store, tb = d / "store.db", d / "tb"
    common = ["--store", str(store), "--log", "tensorboard", "--logdir", str(tb)]
    over = ["--override", f"run_dir={d / 'runs'}"]
    argv = ["train", "--preset", "tiny", "--quiet", "--steps", "8", "--name", "tb-lm"]
    argv += ["--data", str(text)]
    assert main(argv + over + common) == 0
    probe = ["probe", "marked", "--scale", "tiny", "--mechanisms", "blur", "--depths", "2"]
    probe += ["--init", *CELLS, "--seeds", "0", "--steps", str(PROBE_STEPS), "--jobs", "2"]
    probe += ["--out", str(d / "probes.jsonl"), "--no-progress"]
    assert main(probe + common) == 0
    settings = dataclasses.replace(SCALES["tiny"], steps=PROBE_STEPS)
    keys = [Cell("blur", 2, init, 0, "marked").key(settings.resolved()) for init in CELLS]
    return {"dir": d, "store": store, "tb": tb, "keys": keys, "data": str(text)}


def test_training_run_logged_live_equals_the_store(logged):
    got = read_scalars(run_folder(logged["tb"], "tb-lm"))
    with Store(logged["store"]) as st:
        want = lm_oracle(st, "tb-lm", seq_len=64)
        config = st.config("tb-lm")
    # the tiny preset: metrics every step, α at 1 and every 2nd step, light eval at 6, full at 8
    assert [s for s, _ in got["loss"]] == list(range(1, 9))
    assert [s for s, _ in got["alpha/layer_00"]] == [1, 2, 4, 6, 8]
    assert [s for s, _ in got["ppl/small/light"]] == [6]
    assert [s for s, _ in got["ppl/small/recompute"]] == [8]
    assert {"lr", "grad_norm", "tokens_per_s", "alpha/layer_01"} <= set(got)
    assert_same(got, want)
    # logging is not part of the run's identity: nothing of it in the stored config
    assert "tensorboard" not in json.dumps(config) and "log_to" not in config


def test_probe_cells_logged_live_each_in_its_own_folder(logged):
    with Store(logged["store"]) as st:
        stored = set(st.runs(kind="probe")["name"])
        assert set(logged["keys"]) == stored  # the key, and so the store's run, is unchanged
        for key in logged["keys"]:
            folder = run_folder(logged["tb"], key)
            files = [f for f in os.listdir(folder) if f.startswith(EVENT_PREFIX)]
            assert len(files) == 1  # one worker wrote it
            got = read_scalars(folder)
            assert [s for s, _ in got["loss"]] == [0, 25]
            assert [s for s, _ in got["alpha/layer_01"]] == [0, 25, PROBE_STEPS]
            assert sorted(t for t in got if t.startswith("acc/")) == ["acc/13", "acc/5"]
            assert_same(got, probe_oracle(st, key))


def test_export_store_writes_what_live_logging_wrote_and_twice_is_once(logged):
    out = logged["dir"] / "exported"
    argv = ["export-store", "--tensorboard", str(out), "--store", str(logged["store"])]
    for _ in range(2):  # the second export replaces the first
        assert main(argv) == 0
        for run in ["tb-lm", *logged["keys"]]:
            folder = run_folder(out, run)
            assert len([f for f in os.listdir(folder) if f.startswith(EVENT_PREFIX)]) == 1
            assert_same(read_scalars(folder), read_scalars(run_folder(logged["tb"], run)))
    with Store(logged["store"]) as st:
        logged_at = st.evals("tb-lm")["logged_at"]
    walls = wall_times(run_folder(out, "tb-lm"), "ppl/small/light")
    assert walls == pytest.approx([logged_at.iloc[0].timestamp()], abs=1e-3)


def test_export_store_of_the_fixture_store_by_hand(tmp_path, capsys):
    store = tmp_path / "fixture.db"
    names = write_fixture(str(store))
    out = tmp_path / "tb"
    argv = ["export-store", "--tensorboard", str(out), "--store", str(store)]
    assert main(argv + ["smoke-learned-s0", "smoke-fixed-s1"]) == 0
    assert sorted(os.listdir(out)) == ["smoke-fixed-s1", "smoke-learned-s0"]
    learned = read_scalars(out / "smoke-learned-s0")
    # α: layer 0 starts at 0.55 and gains 0.0015 a step, the others lose 0.0004 (fixture_store)
    assert [s for s, _ in learned["alpha/layer_00"]] == [1, 10, 20, 30, 40]
    assert learned["alpha/layer_00"][1][1] == pytest.approx(0.55 + 0.015, rel=1e-6)
    assert learned["alpha/layer_03"][4][1] == pytest.approx(1.45 - 0.016, rel=1e-6)
    fixed = read_scalars(out / "smoke-fixed-s1")
    base = 3.00 + 0.03  # fixture loss of fib/fixed, seed 1
    assert fixed["ppl/bible/recompute"] == [
        (20, pytest.approx(math.exp(base + 0.4), rel=1e-6)),
        (40, pytest.approx(math.exp(base), rel=1e-6)),
    ]
    assert fixed["ppl/bible/freeze/T128"] == [(40, pytest.approx(math.exp(base - 0.02), rel=1e-6))]
    assert fixed["ppl/bible/recompute:block3/T256"][0][1] == pytest.approx(math.exp(base - 0.04))
    assert fixed["ppl/bible/bin7"][0][1] == pytest.approx(math.exp(base + 0.6 - 0.56), rel=1e-6)
    assert not any(t.startswith("alpha/") for t in fixed)  # fixed α is not logged
    assert main(argv) == 0  # every run (LM and probe), then once more
    assert main(argv) == 0
    assert "wrote 8 runs" in capsys.readouterr().out
    probe = run_folder(out, "marked/blur/d2/staggered/s0/n40")
    got = read_scalars(probe)
    assert got["acc/200"] == [(40, pytest.approx(0.9))]
    assert got["acc/350"] == [(40, pytest.approx(0.05))]
    assert got["loss"] == [(s, pytest.approx(3.0 - 0.01 * s)) for s in range(0, 41, 10)]
    assert got["alpha/layer_01"][-1] == (40, pytest.approx(1.45 - 0.02))
    for run in names:  # one copy of each after three exports
        files = [f for f in os.listdir(run_folder(out, run)) if f.startswith(EVENT_PREFIX)]
        assert len(files) == 1, run
    assert fixed == read_scalars(out / "smoke-fixed-s1")
    assert main(argv + ["no-such-run"]) == 2
    assert "no-such-run" in capsys.readouterr().err


def test_sink_fresh_replaces_and_resume_drops_what_followed_the_checkpoint(tmp_path):
    folder = str(tmp_path / "run")
    with TensorBoardSink(folder) as s:
        for step in range(1, 6):
            s.scalars(step, {"loss": float(step)})
    with TensorBoardSink(folder, resume_step=3) as s:  # resumed from step 3's checkpoint
        for step in range(4, 8):
            s.scalars(step, {"loss": 10.0 * step})
    assert read_scalars(folder)["loss"] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 40),
        (5, 50),
        (6, 60),
        (7, 70),
    ]
    with TensorBoardSink(folder) as s:  # the run trained again from scratch
        s.scalars(1, {"loss": -1.0})
    assert read_scalars(folder) == {"loss": [(1, -1.0)]}


def test_a_resumed_sink_sorts_after_the_files_it_resumes(tmp_path):
    """TensorBoard reads a folder's files in name order: creation second, host, pid, then a
    per-process counter that sorts as text (…9 after …10).  A file from this very second with a
    counter that sorts after any new one (the flake: one run in a few of the test above) must
    not be read after the resumed file."""
    folder = tmp_path / "run"
    with TensorBoardSink(str(folder)) as s:
        s.scalars(1, {"loss": 1.0})
    (first,) = os.listdir(folder)
    now = int(time.time())
    parts = first.split(".")  # events.out.tfevents.<second>.<host>.<pid>.<counter>
    late = ".".join(parts[:3] + [f"{now:010d}"] + parts[4:-1] + ["99999"])
    os.rename(folder / first, folder / late)  # this second, a counter that sorts last as text
    with TensorBoardSink(str(folder), resume_step=1) as s:
        s.scalars(2, {"loss": 20.0})
    names = sorted(os.listdir(folder))
    assert names[0] == late and len(names) == 2
    assert int(names[1].split(".")[3]) > now  # a later second: sorts after whatever the counter
    assert read_scalars(folder)["loss"] == [(1, 1.0), (2, 20.0)]
    assert wait_to_sort_last(str(tmp_path / "none")) == 0  # nothing to follow: no wait


def test_run_folders_stay_inside_the_logdir(tmp_path):
    assert run_folder(tmp_path, "a/b") == os.path.join(str(tmp_path), "a", "b")
    for name in ("../../etc", "/abs", "x/./y", "sp ace"):
        path = os.path.realpath(run_folder(tmp_path, name))
        assert path.startswith(os.path.realpath(tmp_path) + os.sep), name
    assert os.path.basename(run_folder(tmp_path, "sp ace")) == "sp_ace"
    with pytest.raises(ValueError, match="log kind"):
        LogSpec("mlflow")


def test_without_log_nothing_is_written_and_tensorboard_not_imported(logged, tmp_path, monkeypatch):
    for mod in ("tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, mod, None)  # importing it now raises ImportError
    monkeypatch.chdir(tmp_path)
    over = {"run_dir": str(logged["dir"] / "runs"), "steps": 2, "data": logged["data"]}
    out = train(make_config("tiny", {**over, "name": "no-log"}), quiet=True)
    assert out["status"] == "done" and not (tmp_path / "runs").exists()
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match=r"pip install 'fiblab\[tensorboard\]'"):
        cfg = make_config("tiny", {**over, "name": "no-tb"})
        train(cfg, quiet=True, log_to=LogSpec(logdir=str(tmp_path / "tb")))
    assert main(["train", "--preset", "tiny", "--logdir", str(tmp_path)]) == 2
