"""The registered fresh-item recall confirmation (`analysis.experiments.study.recall_fresh`):
frozen before scoring, scored run by run, decided by Holm only once every run has its row.
Oracles: binomial tail sums by hand (math.comb), Holm by hand, rows written by hand."""

from __future__ import annotations

import json
import math
import os

import pytest

from analysis.experiments.study import confirm as C
from analysis.experiments.study import fresh as F
from analysis.experiments.study import recall_fresh as R
from analysis.statistics.power import binomial_power


def _tail(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


@pytest.mark.parametrize("n, alpha", [(100, 0.05), (100, 0.05 / 35), (300, 0.01)])
def test_power_is_the_tail_beyond_the_least_rejecting_count(n, alpha):
    chance = 1 / 12
    k = next(k for k in range(n + 1) if _tail(k, n, chance) <= alpha)  # brute force
    assert binomial_power(0.2, n, chance, alpha) == pytest.approx(_tail(k, n, 0.2), rel=1e-9)
    assert binomial_power(chance, n, chance, alpha) <= alpha  # the test's size


def _conf(names):
    return [
        {"scheme": n.split("-")[0], "seed": i, "setup": {"steps": 500}, "run": {"name": n}}
        for i, n in enumerate(names)
    ]


def _finish(folder, step):
    """A run folder as training leaves it: one checkpoint at ``step`` with its sidecar."""
    from lab.training.checkpoint import save_checkpoint

    save_checkpoint(str(folder), step, {"step": step}, keep=1)


def test_register_then_score_run_by_run_then_decide_by_holm(tmp_path, monkeypatch):
    out, runs = str(tmp_path / "rf"), tmp_path / "runs"
    names = ["fixed-1", "stagger-1", "fixed-2", "stagger-2"]
    monkeypatch.setattr(C, "read_rows", lambda *a: _conf(names))
    with pytest.raises(ValueError, match="--register"):
        R.run_score(out, str(runs))  # nothing scored before the protocol is frozen
    reg = R.register(out, _conf(names))
    assert reg["runs"] == names and reg["protocol_sha256"] == R.protocol_hash()
    with pytest.raises(ValueError, match="registered already"):
        R.register(out, _conf(names))
    ps = {"fixed-1": 0.004, "stagger-1": 0.03, "fixed-2": 0.0001, "stagger-2": 0.5}
    seen = []

    def fake(folder, protocol=R.PROTOCOL):
        name = os.path.basename(folder)
        seen.append(name)
        return {"items": 1000, "correct": 100, "acc": 0.1, "p": ps[name], "step": 500}

    monkeypatch.setattr(R, "score", fake)
    for n in names:
        _finish(runs / n, 500)
    assert R.run_score(out, str(runs), limit=1, log=lambda *a: None) == ["fixed-1"]
    doc = R.decide(out)
    assert doc["verdict"] == "pending" and "1 of 4" in doc["why"]  # no test on part
    assert "p_holm" not in doc
    R.run_score(out, str(runs), log=lambda *a: None)
    assert seen == names and [r["name"] for r in R.rows(out)] == names
    doc = R.decide(out)
    # Holm by hand: .0001 < .05/4, .004 < .05/3, .03 > .05/2 stops it
    assert doc["verdict"] == "held" and doc["above"] == ["fixed-1", "fixed-2"]
    assert doc["above_raw"] == 3
    assert doc["p_holm"]["fixed-1"] == pytest.approx(0.004 * 3)
    assert json.load(open(os.path.join(out, "claims.json")))["verdict"] == "held"
    page = open(os.path.join(out, "report.md")).read()
    assert "**held**: 2 of 4 runs above chance after Holm (raw 3)" in page
    with pytest.raises(ValueError, match="holds scored runs"):
        R.register(out, _conf(names))
    monkeypatch.setitem(R.PROTOCOL, "items", 999)  # a changed protocol is refused
    with pytest.raises(ValueError, match="changed since it was frozen"):
        R.decide(out)


def test_nothing_above_chance_is_not_shown_and_a_missing_checkpoint_needs_restore(
    tmp_path, monkeypatch
):
    out = str(tmp_path / "rf")
    names = ["fixed-1", "fixed-2"]
    monkeypatch.setattr(C, "read_rows", lambda *a: _conf(names))
    R.register(out, _conf(names))
    with pytest.raises(ValueError, match="--restore"):
        R.run_score(out, str(tmp_path / "none"), log=lambda *a: None)
    with open(os.path.join(out, F.ROWS), "w") as f:
        for n in names:
            f.write(
                json.dumps({"name": n, "acc": 0.09, "p": 0.3, "items": 1000, "step": 500}) + "\n"
            )
    doc = R.decide(out)
    assert doc["verdict"] == "not shown" and doc["above"] == []


def test_a_folder_a_killed_restore_left_part_trained_is_not_scored(tmp_path, monkeypatch):
    """A restore killed at step 473 leaves the folder with its step-250 checkpoint: it is not the
    finished model, so scoring refuses it (or finishes it first with --restore), and a row that
    scored such a checkpoint stops the verdict until it is scored again."""
    out, runs = str(tmp_path / "rf"), tmp_path / "runs"
    names = ["fixed-1", "fixed-2"]
    monkeypatch.setattr(C, "read_rows", lambda *a: _conf(names))
    R.register(out, _conf(names))
    _finish(runs / "fixed-1", 500)
    _finish(runs / "fixed-2", 250)  # killed part-way
    rows = _conf(names)
    assert C.finished_folder(rows[0], str(runs)) == str(runs / "fixed-1")
    assert C.finished_folder(rows[1], str(runs)) is None
    assert C.finished_folder(rows[1], str(tmp_path / "none")) is None
    scored = []

    def fake(folder, protocol=R.PROTOCOL):
        scored.append(os.path.basename(folder))
        return {"items": 10, "correct": 1, "acc": 0.1, "p": 0.5, "step": 500}

    monkeypatch.setattr(R, "score", fake)
    with pytest.raises(ValueError, match="no finished checkpoint in .*fixed-2.*--restore"):
        R.run_score(out, str(runs), log=lambda *a: None)
    assert scored == ["fixed-1"]  # the part-trained one is not scored
    restored = []
    monkeypatch.setattr(C, "restore", lambda names, runs_dir: restored.extend(names))
    R.run_score(out, str(runs), restore=True, log=lambda *a: None)
    assert restored == ["fixed-2"] and scored == ["fixed-1", "fixed-2"]  # finished, then scored
    # rows as a scorer without the check left them: the verdict waits for the row scored again
    bad = [{"name": "fixed-1", "acc": 0.1, "p": 0.5, "items": 10, "step": 500},
           {"name": "fixed-2", "acc": 0.1, "p": 0.5, "items": 10, "step": 250}]  # fmt: skip
    with open(os.path.join(out, F.ROWS), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in bad)
    with pytest.raises(ValueError, match=r"unfinished checkpoint: fixed-2 \(step 250 of 500\)"):
        R.decide(out)


def test_the_battery_can_score_recall_alone():
    """`run_battery` with no RULER hops and no LEGO lengths: recall only (the fresh-item
    protocol's items), the same items as recall in a full battery of the same seed."""
    import torch

    from lab.lm.model import build_model
    from probes.battery import run_battery

    torch.manual_seed(0)
    model = build_model("tiny")
    vocab = model.cfg.vocab_size
    alone = run_battery(model, vocab, n=8, seed=3, hops=(), lengths=())
    full = run_battery(model, vocab, n=8, seed=3)
    assert set(alone) == {"assoc_recall"} and alone["assoc_recall"] == full["assoc_recall"]
