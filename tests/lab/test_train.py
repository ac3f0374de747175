"""The training recipe: LR schedule, decay groups, exact kill-and-resume, corrupt checkpoints,
divergence, torchrun = one process, and errors before any work."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

from lab.data.prepared import prepare
from lab.lm.model import build_model
from lab.store import Store
from lab.training.checkpoint import (
    CorruptCheckpoint,
    latest_good_checkpoint,
    list_checkpoints,
    load_checkpoint,
    resume_point,
    save_checkpoint,
)
from lab.training.optim import lr_at, param_groups
from lab.training.train import TrainingDiverged, train
from lab.training.trainconfig import make_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A shared runs folder whose data cache holds the embedded corpus at vocab 512."""
    d = tmp_path_factory.mktemp("runs")
    prepare("bible", vocab_size=512, cache_dir=str(d / "data"))
    return d


def test_lr_schedule_matches_spec():
    cfg = make_config("fib-stagger-w12")
    assert lr_at(1, cfg) == pytest.approx(1e-6)
    assert lr_at(300, cfg) == pytest.approx(3e-4)
    assert lr_at(6650, cfg) == pytest.approx(3e-4 * (0.1 + 0.45))  # p = 0.5
    assert lr_at(13000, cfg) == pytest.approx(3e-5)
    assert (cfg.steps, cfg.tokens_per_step, cfg.micro_batch, cfg.accum) == (13000, 32768, 8, 4)
    assert make_config("fib-learned-w6").accum == 8  # 4 × 8 as the paper


def test_weight_decay_only_on_matrices():
    m = build_model("tiny", schedule="learned")
    decay, other = param_groups(m, 0.1)
    names = {id(p): n for n, p in m.named_parameters()}
    assert all(p.dim() >= 2 for p in decay["params"]) and decay["weight_decay"] == 0.1
    assert {names[id(p)].split(".")[-1] for p in other["params"]} == {"weight", "theta"}
    assert all("norm" in names[id(p)] or "theta" in names[id(p)] for p in other["params"])
    assert len(decay["params"]) + len(other["params"]) == len(list(m.parameters()))


# `python -c` body: the CLI, with the process SIGKILLed right after the checkpoint of step
# argv[1] is written (a crash at the worst moment), patched in from here, not in product code.
_KILL_AFTER_CHECKPOINT = """
import os, signal, sys
import lab.training.train as T
at, save = int(sys.argv[1]), T.save_checkpoint
def save_then_die(run_dir, step, state, keep):
    path = save(run_dir, step, state, keep)
    if step == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return path
T.save_checkpoint = save_then_die
from fiblab.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _cli(runs, *args, kill_at=None):
    head = ["-m", "fiblab.cli"] if kill_at is None else ["-c", _KILL_AFTER_CHECKPOINT, str(kill_at)]
    return subprocess.run(
        [
            sys.executable,
            *head,
            "train",
            "--preset",
            "tiny",
            "--quiet",
            "--store",
            str(runs / "store.db"),
            "--override",
            f"run_dir={runs}",
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def _losses(runs, name):
    with Store(runs / "store.db") as st:
        m = st.metrics(name, names=["loss"])
    return dict(zip(m["step"], m["value"]))


@pytest.fixture(scope="module")
def straight(runs):
    """The uninterrupted reference run `straight` (12 steps, checkpoints at 4, 8, 12), trained
    once per module by the CLI: each test that needs it gets it, whatever ran before."""
    full = _cli(runs, "--name", "straight")
    assert full.returncode == 0, full.stderr
    return runs / "straight"


def _same_weights(a, b):
    """The model tensors of two checkpoints are equal bit for bit."""
    ma, mb = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    return ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)


def test_kill_and_resume_reproduces_losses_exactly(runs, straight):
    killed = _cli(runs, "--name", "killed", kill_at=8)
    assert killed.returncode == -9  # SIGKILL after step 8
    assert [os.path.basename(p) for p in list_checkpoints(runs / "killed")][-1] == "ckpt_0000008.pt"
    again = _cli(runs, "--name", "killed")
    assert again.returncode != 0 and "--resume" in again.stderr  # nothing overwritten
    resumed = _cli(runs, "--name", "killed", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a, b = _losses(runs, "straight"), _losses(runs, "killed")
    assert sorted(a) == list(range(1, 13)) and a == b  # bit for bit
    with Store(runs / "store.db") as st:
        runs_df = st.runs()
        assert set(runs_df[runs_df.name.isin(["straight", "killed"])].status) == {"done"}
        assert len(st.alphas("killed")) > 0  # learned α logged
        ev = st.evals("killed")
        assert {"light", "recompute"} <= set(ev["kind"]) and (ev["tokens"] > 0).all()


def test_corrupt_checkpoint_falls_back_to_previous(straight, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(straight, d)
    newest = list_checkpoints(d)[-1]
    with open(newest, "r+b") as f:
        f.truncate(os.path.getsize(newest) // 2)
    with pytest.raises(CorruptCheckpoint, match="corrupt"):
        load_checkpoint(newest)
    notes = []
    ck = latest_good_checkpoint(str(d), notes.append)
    assert ck["step"] == 8 and "skipping" in notes[0]
    os.remove(list_checkpoints(d)[-2] + ".json")  # an unfinished write
    assert latest_good_checkpoint(str(d), notes.append)["step"] == 4


@pytest.mark.slow  # 11 s; the fallback itself is test_corrupt_checkpoint_falls_back_to_previous,
# exact resume test_kill_and_resume_reproduces_losses_exactly
def test_resume_after_the_newest_checkpoint_is_truncated_equals_an_uninterrupted_run(
    runs, straight
):
    """Killed after step 8, its newest checkpoint then cut in half (a disk that lost the end of
    the file): resume goes back to step 4 and the run still ends bit for bit as `straight`."""
    killed = _cli(runs, "--name", "cut", kill_at=8)
    assert killed.returncode == -9
    newest = list_checkpoints(runs / "cut")[-1]
    assert os.path.basename(newest) == "ckpt_0000008.pt"
    with open(newest, "r+b") as f:
        f.truncate(os.path.getsize(newest) // 2)
    resumed = _cli(runs, "--name", "cut", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a, b = _losses(runs, "straight"), _losses(runs, "cut")
    assert sorted(b) == list(range(1, 13)) and a == b
    with Store(runs / "store.db") as st:
        ev = st.events("cut")
    assert ev[ev.kind == "resume"]["message"].tolist() == ["step 4"]  # not 8, not 0
    assert _same_weights(list_checkpoints(straight)[-1], list_checkpoints(runs / "cut")[-1])


def _corrupt_all(run_dir):
    """Cut every checkpoint of `run_dir` in half; returns {path: size after the cut}."""
    sizes = {}
    for p in list_checkpoints(run_dir):
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) // 2)
        sizes[p] = os.path.getsize(p)
    return sizes


def _save_killed(run_dir: str, step: int, at: int, after: bool) -> None:
    """A child process that saves checkpoint ``step`` and dies with ``os._exit`` (no cleanup,
    as SIGKILL) before or after its ``at``-th rename."""
    import multiprocessing

    def child():
        from lab.training import checkpoint as CK

        calls, real = [], os.replace

        def replace(a, b):
            calls.append(b)
            if len(calls) == at and not after:
                os._exit(9)
            real(a, b)
            if len(calls) == at and after:
                os._exit(9)

        os.replace = replace
        CK.save_checkpoint(run_dir, step, {"step": step, "w": torch.arange(4.0)}, keep=3)
        os._exit(0)

    p = multiprocessing.get_context("fork").Process(target=child)
    p.start()
    p.join(30)


def test_a_kill_at_any_moment_of_a_save_leaves_a_whole_checkpoint_or_none(tmp_path):
    """Killed before or after each rename of a save, the run resumes: from the new checkpoint
    whole, or from the one before (a sidecar written after the rename once left a listed
    checkpoint without one, and resume refused the run as damaged: a killed Ray sweep did).
    Oracle: every kill point enumerated; the survivor loads with its checksum."""
    for at in (1, 2, 3):
        for after in (False, True):
            run_dir = str(tmp_path / f"k{at}{after}")
            save_checkpoint(run_dir, 2, {"step": 2, "w": torch.zeros(4)}, keep=3)
            _save_killed(run_dir, 4, at, after)
            ck = resume_point(run_dir, "k", resume=True)  # never "every checkpoint is corrupt"
            assert ck["step"] in (2, 4), (at, after)
            steps = [load_checkpoint(p)["step"] for p in list_checkpoints(run_dir)]
            assert steps in ([2], [2, 4]) and ck["step"] == steps[-1], (at, after, steps)
    run_dir = str(tmp_path / "first")  # the run's first checkpoint, killed mid-save: step 0
    _save_killed(run_dir, 2, 1, True)
    assert resume_point(run_dir, "k", resume=True) is None and list_checkpoints(run_dir) == []


def test_every_checkpoint_corrupt_refuses_resume_unless_restart(runs):
    data = prepare("bible", vocab_size=512, cache_dir=str(runs / "data"))
    over = {"run_dir": str(runs), "steps": 4, "ckpt_every": 2, "eval_every": 0, "name": "allbad"}
    cfg = make_config("tiny", over)
    first = train(cfg, store_path=str(runs / "store.db"), quiet=True, data=data)
    run_dir = runs / "allbad"
    sizes = _corrupt_all(run_dir)
    assert [os.path.basename(p) for p in sizes] == ["ckpt_0000002.pt", "ckpt_0000004.pt"]
    with pytest.raises(ValueError, match=r"every checkpoint .* is corrupt.*--restart"):
        train(cfg, resume=True, store_path=str(runs / "store.db"), quiet=True, data=data)
    assert {p: os.path.getsize(p) for p in list_checkpoints(run_dir)} == sizes  # untouched
    cli = _cli(runs, "--name", "allbad", "--resume", "--override", "steps=4", "ckpt_every=2")
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert cli.stderr.strip().count("\n") == 0 and "--restart" in cli.stderr  # one line
    assert {p: os.path.getsize(p) for p in list_checkpoints(run_dir)} == sizes
    again = train(cfg, resume=True, restart=True, quiet=True, data=data)
    assert again["losses"] == first["losses"] and sorted(again["losses"]) == [1, 2, 3, 4]
    for p in sizes:  # set aside for inspection, no longer listed
        assert os.path.getsize(p + ".corrupt") == sizes[p]
    assert [load_checkpoint(p)["step"] for p in list_checkpoints(run_dir)] == [2, 4]
    with pytest.raises(ValueError, match="already has checkpoints.*--resume"):
        train(cfg, restart=True, quiet=True, data=data)  # good checkpoints: restart is no reset


def test_divergence_stops_keeps_checkpoint_and_marks_failed(runs):
    cfg = make_config(
        "tiny", {"lr": 1e30, "warmup": 1, "run_dir": str(runs), "ckpt_every": 1, "name": "diverge"}
    )
    data = prepare("bible", vocab_size=512, cache_dir=str(runs / "data"))
    with pytest.raises(TrainingDiverged, match="not finite"):
        train(cfg, store_path=str(runs / "store.db"), quiet=True, data=data)
    assert list_checkpoints(runs / "diverge")  # the good one survives
    with Store(runs / "store.db") as st:
        row = st.runs().set_index("name").loc["diverge"]
        assert row.status == "failed" and "not finite" in row.message


@pytest.mark.slow  # ≈ 15 s: two torchrun ranks
def test_torchrun_two_ranks_equal_one_process(runs):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    common = [
        "--preset",
        "tiny",
        "--quiet",
        "--store",
        str(runs / "store.db"),
        "--override",
        f"run_dir={runs}",
        "steps=6",
        "eval_every=0",
    ]
    one = subprocess.run(
        [sys.executable, "-m", "fiblab.cli", "train", "--name", "one", *common],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert one.returncode == 0, one.stderr
    two = subprocess.run(
        [
            torchrun,
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "fiblab.cli",
            "train",
            "--name",
            "two",
            *common,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert two.returncode == 0, two.stderr[-2000:]
    a, b = _losses(runs, "one"), _losses(runs, "two")
    assert sorted(a) == sorted(b) == list(range(1, 7))
    assert all(abs(a[s] - b[s]) <= 1e-5 for s in a)


@pytest.mark.parametrize(
    "preset,over,needle",
    [
        ("fib-stagger-w99", {}, "fib-stagger-w99"),
        ("tiny", {"colour": "red"}, "colour"),
        ("tiny", {"model.colour": "red"}, "colour"),
        ("tiny", {"micro_batch": 3}, "micro_batch"),
    ],
)
def test_bad_config_before_any_work(preset, over, needle):
    with pytest.raises(ValueError, match=needle):
        make_config(preset, over)


def test_missing_corpus_fails_before_training(tmp_path):
    cfg = make_config("tiny", {"data": str(tmp_path / "nope.txt"), "run_dir": str(tmp_path)})
    with pytest.raises(ValueError, match="nope.txt"):
        train(cfg, quiet=True)
    assert not (tmp_path / "tiny").exists() or not list_checkpoints(tmp_path / "tiny")


def test_sequence_longer_than_data_fails_before_training(tmp_path):
    import numpy as np

    from lab.data.tokenizer import write_tokens

    tokens = tmp_path / "short.bin"
    write_tokens(tokens, np.arange(60) % 500, 512)  # 60 tokens; tiny has seq_len 64
    cfg = make_config("tiny", {"data": str(tokens), "run_dir": str(tmp_path), "val_tokens": 10})
    with pytest.raises(ValueError, match="seq_len"):
        train(cfg, quiet=True)
    assert not list_checkpoints(tmp_path / "tiny")


def test_resume_refuses_another_precision_and_the_run_records_it(runs):
    """A run trained in fp32 does not continue in bf16 by mistake (a machine whose `auto`
    differs, or a changed flag); its checkpoint and store provenance name the precision used."""
    import warnings

    import torch

    from lab.store.variant import variant_of

    over = {"run_dir": str(runs), "steps": 4, "ckpt_every": 2, "eval_every": 0, "name": "prec"}
    data = prepare("bible", vocab_size=512, cache_dir=str(runs / "data"))
    cfg = make_config("tiny", {**over, "steps": 2, "precision": "fp32"})
    train(cfg, store_path=str(runs / "store.db"), quiet=True, data=data)
    assert (
        torch.load(list_checkpoints(runs / "prec")[-1], weights_only=False)["precision"] == "fp32"
    )
    with Store(runs / "store.db") as st:
        assert variant_of(st.config("prec")).precision == "fp32"
    bf16 = make_config("tiny", {**over, "precision": "bf16"})
    with (
        warnings.catch_warnings(),
        pytest.raises(
            ValueError, match=r"trained in fp32 and would continue in bf16.*precision=fp32"
        ),
    ):
        warnings.simplefilter("ignore")  # bf16 on a CPU without native bf16: slow, says so
        train(bf16, resume=True, quiet=True, data=data)
    out = train(
        make_config("tiny", {**over, "precision": "fp32"}), resume=True, quiet=True, data=data
    )
    assert out["status"] == "done"


def test_a_stop_request_that_comes_too_late_is_removed_with_the_run_done(runs, monkeypatch):
    """A stop asked for in the final evaluation (after the loop's last check) cannot be served:
    the run ends done.  Its STOP file was left behind, so the run read "stopping" to the end
    and a later `fiblab train --resume` from a shell stopped after its first step.  The run
    removes it at its end now.  Oracle: the folder's listing and the store's row."""
    import lab.training.train as T
    from lab.training.stop import STOP_FILE, request_stop

    cfg = make_config(
        "tiny", {"steps": 2, "eval_every": 0, "run_dir": str(runs), "name": "late-stop"}
    )
    run_dir = os.path.join(str(runs), "late-stop")
    real = T._evaluator

    def asks_in_the_final_evaluation(*a, **k):
        evaluate = real(*a, **k)

        def wrapped(step, kind, limit):
            if step == cfg.steps:
                request_stop(run_dir)
                assert os.path.exists(os.path.join(run_dir, STOP_FILE))
            return evaluate(step, kind, limit)

        return wrapped

    monkeypatch.setattr(T, "_evaluator", asks_in_the_final_evaluation)
    data = prepare("bible", vocab_size=512, cache_dir=str(runs / "data"))
    out = train(cfg, store_path=str(runs / "store.db"), quiet=True, data=data)
    assert sorted(out["losses"]) == [1, 2]
    assert not os.path.exists(os.path.join(run_dir, STOP_FILE))
    with Store(runs / "store.db") as st:
        assert st.runs().set_index("name").loc["late-stop"].status == "done"
