"""What a second `fiblab demo` may reuse (`analysis.experiments.demo.reuse`): only an intact checkpoint at the
last step of a run the store calls done, and only evaluations saved under the same checkpoint and
settings that the store still holds. Fast: hand-made checkpoints and stores, no training."""

import hashlib
import json
import math

import torch

from analysis.experiments.demo import reuse as demo_reuse
from lab.store import Store
from lab.training.checkpoint import save_checkpoint


def _ckpt(run_dir, step: int, value: float = 0.0) -> str:
    return save_checkpoint(str(run_dir), step, {"w": torch.full((3,), value), "step": step}, 2)


def test_checkpoint_id_is_the_newest_intact_checkpoint(tmp_path):
    assert demo_reuse.checkpoint_id(str(tmp_path / "none")) is None
    _ckpt(tmp_path, 3)
    path = _ckpt(tmp_path, 6)
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    assert demo_reuse.checkpoint_id(str(tmp_path)) == {
        "file": "ckpt_0000006.pt",
        "step": 6,
        "sha256": sha,
    }
    with open(path, "r+b") as f:  # one byte flipped: no longer the checkpoint its sidecar names
        b = f.read(1)
        f.seek(0)
        f.write(bytes([b[0] ^ 1]))
    assert demo_reuse.checkpoint_id(str(tmp_path)) is None
    path = _ckpt(tmp_path, 9)
    (tmp_path / "ckpt_0000009.pt.json").unlink()  # killed before the sidecar was written
    assert demo_reuse.checkpoint_id(str(tmp_path)) is None


def test_finished_needs_the_last_step_and_a_done_run(tmp_path):
    run = tmp_path / "r"
    assert not demo_reuse.finished(str(run), "r", 6, None)  # nothing trained
    _ckpt(run, 4)
    assert not demo_reuse.finished(str(run), "r", 6, None)  # interrupted at step 4
    _ckpt(run, 6)
    assert demo_reuse.finished(str(run), "r", 6, None)
    assert not demo_reuse.finished(str(run), "r", 8, None)  # the demo now asks for more steps
    db = str(tmp_path / "s.db")
    assert not demo_reuse.finished(str(run), "r", 6, db)  # the store does not know the run
    with Store(db) as s:
        s.start_run("r", {"seed": 1}, kind="lm", seed=1)
        s.set_status("r", "running")
    assert not demo_reuse.finished(str(run), "r", 6, db)
    with Store(db) as s:
        s.set_status("r", "done")
    assert demo_reuse.finished(str(run), "r", 6, db)


def test_saved_evaluations_are_reused_only_under_the_same_key(tmp_path):
    run = tmp_path / "r"
    _ckpt(run, 6)
    key = demo_reuse.evaluation_key(str(run), (1, 2), 4, 8)
    ev = {"alphas": [1.0, 0.5], "datasets": {"bible": {"ppl": math.inf, "x": [math.nan, 2.5]}}}
    bat = {"skipped": "items longer than the model's context"}
    demo_reuse.save(str(run), key, ev, bat)
    got = demo_reuse.cached(str(run), key, "r", [64, 128], None)
    assert got is not None
    # NaN and infinities survive (NaN != NaN, so compare the text)
    assert json.dumps(got) == json.dumps((ev, bat))
    for other in (
        demo_reuse.evaluation_key(str(run), (1, 2, 4), 4, 8),  # another factor
        demo_reuse.evaluation_key(str(run), (1, 2), None, 8),  # every window, not 4
        demo_reuse.evaluation_key(str(run), (1, 2), 4, 100),  # a larger battery
    ):
        assert demo_reuse.cached(str(run), other, "r", [64, 128], None) is None
    _ckpt(run, 6, value=1.0)  # retrained: another checkpoint at the same step
    new_key = demo_reuse.evaluation_key(str(run), (1, 2), 4, 8)
    assert new_key["checkpoint"] != key["checkpoint"]
    assert demo_reuse.cached(str(run), new_key, "r", [64, 128], None) is None
    assert demo_reuse.cached(str(run), key, "r", [64, 128], None) is not None  # the old key
    (run / demo_reuse.CACHE).write_text('{"key": ')  # half-written
    assert demo_reuse.cached(str(run), key, "r", [64, 128], None) is None


def test_saved_evaluations_need_the_stores_rows(tmp_path):
    run, db = tmp_path / "r", str(tmp_path / "s.db")
    _ckpt(run, 6)
    key = demo_reuse.evaluation_key(str(run), (1, 2), 4, 8)
    demo_reuse.save(str(run), key, {"alphas": []}, {})
    assert demo_reuse.cached(str(run), key, "r", [64, 128], db) is None  # a fresh store
    with Store(db) as s:
        s.start_run("r", {"seed": 1}, kind="lm", seed=1)
        s.log_eval("r", 6, "bible", 64, 3.0, 256)
        s.log_eval("r", 6, "bible", 128, 3.1, 256, kind="freeze")  # the other policy only
        s.log_eval("r", 3, "bible", 128, 3.1, 256)  # an earlier step
    assert demo_reuse.cached(str(run), key, "r", [64, 128], db) is None
    with Store(db) as s:
        s.log_eval("r", 6, "bible", 128, 3.1, 256)
    assert demo_reuse.cached(str(run), key, "r", [64, 128], db) == ({"alphas": []}, {})
