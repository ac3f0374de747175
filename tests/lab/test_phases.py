"""The phase file a training process keeps beside its checkpoints (`lab.training.phases`):
facts merge within one process, an earlier process's facts are dropped, a heartbeat never
starts a file, and nothing here raises.  Oracle: the JSON read back, field by field."""

import json
import os

from lab.training import phases as RP


def _read(d):
    with open(os.path.join(d, RP.PHASE_FILE)) as f:
        return json.load(f)


def test_phases_merge_within_a_process_and_a_beat_keeps_the_phase(tmp_path):
    d = str(tmp_path)
    RP.write_phase(d, RP.STARTING, eval_every=20)
    RP.write_phase(d, RP.TRAINING, start_step=40)
    got = _read(d)
    assert (got["phase"], got["eval_every"], got["start_step"]) == (RP.TRAINING, 20, 40)
    assert got["pid"] == os.getpid()
    since = got["since"]
    RP.beat(d, 41)
    got = _read(d)
    assert (got["phase"], got["since"], got["step"], got["start_step"]) == (
        RP.TRAINING,
        since,
        41,
        40,
    )
    assert got["step_at"] >= since


def test_an_earlier_process_facts_are_dropped_and_a_beat_writes_nothing_over_them(tmp_path):
    d = str(tmp_path)
    old = {"phase": RP.TRAINING, "since": 1.0, "pid": -7, "start_step": 99}
    (tmp_path / RP.PHASE_FILE).write_text(json.dumps(old))
    RP.beat(d, 5)  # not this process's phase: left as it is
    assert _read(d) == old
    RP.write_phase(d, RP.STARTING)
    got = _read(d)
    assert "start_step" not in got and got["pid"] == os.getpid()


def test_no_folder_no_file_and_no_raise(tmp_path):
    missing = str(tmp_path / "not-made")
    RP.write_phase(missing, RP.STARTING)
    RP.beat(missing, 1)
    assert not os.path.exists(missing)
    blocked = tmp_path / "ro"
    blocked.mkdir()
    (blocked / RP.PHASE_FILE).mkdir()  # a folder where the file goes: the write fails
    RP.write_phase(str(blocked), RP.STARTING)  # a progress note never stops a run
    assert RP.read_phase(str(blocked)) is None


def test_training_keeps_its_first_start_across_evaluations(tmp_path, monkeypatch):
    """Issue 42: a view attached after a mid-run evaluation counted training from the last
    evaluation; the file keeps when this process first trained."""
    d = str(tmp_path)
    clock = iter([100.0, 200.0, 260.0, 300.0])
    monkeypatch.setattr(RP.time, "time", lambda: next(clock))
    RP.write_phase(d, RP.TRAINING)
    RP.write_phase(d, RP.EVALUATING)
    assert _read(d)["training_since"] == 100.0  # merged over, kept
    RP.write_phase(d, RP.TRAINING)
    got = _read(d)
    assert (got["since"], got["training_since"]) == (260.0, 100.0)
    (tmp_path / RP.PHASE_FILE).write_text(json.dumps({**got, "pid": -7}))  # another process's
    RP.write_phase(d, RP.TRAINING)
    assert _read(d)["training_since"] == 300.0  # its first start, not the earlier process's
