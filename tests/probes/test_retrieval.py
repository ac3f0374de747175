"""The retrieval-probe loop: it learns, records α, resumes, and prints the Table-2 layout."""

import json
import math

import pytest
import torch

from analysis.tables.probe_table import format_table2, table2_rows
from fiblab.cli import main as cli_main
from probes.grid import load_records, run_grid, table2
from probes.record import alpha_drift
from probes.runner import build_probe_model, run_cell
from probes.settings import SCALES, Cell

TINY = SCALES["tiny"]


def test_dense_learns_marked_task_at_depth_2():
    rec = run_cell(Cell("dense", 2, "-", 0), TINY, progress=False)
    chance = 1 / TINY.task.vocab
    assert rec["acc"]["5"] > 0.5 > 10 * chance
    assert rec["loss"][-1]["loss"] < rec["loss"][0]["loss"]


@pytest.mark.parametrize(
    "mech,init,first", [("blur", "staggered", [0.55, 1.45]), ("learned", "uniform", [1.0, 1.0])]
)
def test_learned_mechanisms_record_alpha_trajectory(mech, init, first):
    settings = type(TINY)(**{**TINY.__dict__, "steps": 30, "log_every": 10})
    rec = run_cell(Cell(mech, 2, init, 1), settings, progress=False)
    traj = rec["trajectory"]
    assert [t["step"] for t in traj] == [0, 10, 20, 30]
    assert [round(a, 4) for a in traj[0]["alphas"]] == first
    assert rec["alphas"] == traj[-1]["alphas"] and alpha_drift(rec) > 0  # θ received updates
    assert all(0.5 < a < 1.5 for a in rec["alphas"])


def test_non_learned_mechanisms_have_their_alphas():
    m = build_probe_model(Cell("fib-stagger", 4, "-", 0), SCALES["paper"])
    assert [round(a, 4) for a in m.alphas()] == [0.5, 0.8333, 1.1667, 1.5]
    assert m.cfg.d_model == 256 and m.cfg.n_heads == 4 and m.cfg.n_kv_heads == 2
    assert math.isnan(build_probe_model(Cell("dense", 2, "-", 0), TINY).alphas()[0])
    with pytest.raises(ValueError, match="'gumbel'"):
        build_probe_model(Cell("gumbel", 2, "-", 0), TINY)


def test_grid_resumes_and_skips_finished_cells(tmp_path):
    out = tmp_path / "probe.jsonl"
    settings = type(TINY)(**{**TINY.__dict__, "steps": 5, "log_every": 5})
    cells = [Cell("fib-fixed", 2, "-", 0), Cell("pow2", 2, "-", 0)]
    first = run_grid(cells[:1], settings, str(out), progress=False)
    with open(out, "a") as f:
        f.write('{"key": "truncated')  # a run killed mid-write
    again = run_grid(cells, settings, str(out), progress=False)
    assert again[0] == first[0]  # read back, not retrained
    assert len(load_records(str(out))) == 2
    rows = table2(again, "pow2")
    assert rows[0]["depth"] == 2 and set(rows[0]["acc"]) == {"5", "13"}
    assert "acc@5" in format_table2(rows)


def test_table2_puts_paper_values_beside_ours():
    rec = {
        "mechanism": "blur",
        "depth": 4,
        "init": "staggered",
        "alphas": [0.6, 1.4],
        "acc": {"200": 0.5, "350": 0.1},
        "seconds": 1.0,
    }
    row = table2_rows([rec, {**rec, "acc": {"200": 0.7, "350": 0.3}}])[0]
    assert row["acc"]["200"] == pytest.approx(0.6) and row["seeds"] == 2
    assert row["paper"]["acc"] == {"200": 0.88, "350": 0.17}


def test_cli_probe_json(tmp_path, capsys):
    out = tmp_path / "p.jsonl"
    assert (
        cli_main(
            [
                "probe",
                "marked",
                "--scale",
                "tiny",
                "--steps",
                "4",
                "--depths",
                "2",
                "--init",
                "uniform",
                "--seeds",
                "0",
                "--mechanisms",
                "dense",
                "blur",
                "--out",
                str(out),
                "--json",
                "--no-progress",
                "--store",
                str(tmp_path / "store.db"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "NaN" not in out  # strict JSON: a dense layer's α (NaN) is printed as null
    lines = [json.loads(x) for x in out.splitlines()]
    assert lines[0]["alphas"] == [None, None]
    assert [(r["mechanism"], r["depth"], r["init"], r["seed"]) for r in lines] == [
        ("dense", 2, "-", 0),
        ("blur", 2, "uniform", 0),
    ]
    assert all({"alphas", "acc", "seconds"} <= set(r) for r in lines)
    assert len(lines[1]["alphas"]) == 2
    from lab.store import Store

    with Store(tmp_path / "store.db") as st:
        probes = st.probes()
        assert set(probes["mechanism"]) == {"dense", "blur"} and len(probes) == 4  # 2 distances
        assert len(st.alphas()) > 0


def test_shift_task_learns_and_reports_controls():
    from probes.settings import TASK_SCALES

    settings = TASK_SCALES["shift"]["tiny"]
    rec = run_cell(Cell("dense", 2, "-", 0, "shift", 8), settings, progress=False)
    assert list(rec["acc"]) == ["8", "3"]  # trained distance first, then controls
    assert rec["acc"]["8"] > 0.5  # chance is 1/16
    assert rec["key"].startswith("shift@8/dense/")


def test_kv_task_runs_with_forced_choice():
    from probes.settings import TASK_SCALES

    settings = type(TINY)(**{**TASK_SCALES["kv"]["tiny"].__dict__, "steps": 3})
    rec = run_cell(Cell("fib-fixed", 1, "-", 0, "kv"), settings, progress=False)
    assert list(rec["acc"]) == [str(d) for d in range(40, 881, 40)]
    assert all(0.0 <= a <= 1.0 for a in rec["acc"].values())
    assert rec["key"].startswith("kv@coverage/fib-fixed/")


def test_on_step_reports_progress_and_alphas():
    from dataclasses import replace

    from probes.runner import run_cell
    from probes.settings import SCALES, Cell

    settings = replace(SCALES["tiny"], steps=30)
    seen = []
    rec = run_cell(
        Cell("learned", 2, "staggered", 0),
        settings,
        progress=False,
        on_step=lambda cell, done, n, loss, secs, alphas: seen.append((done, n, alphas)),
    )
    assert [d for d, _, _ in seen] == [1, 26, 30] and all(n == 30 for _, n, _ in seen)
    assert seen[-1][2] == rec["alphas"] and len(seen[0][2]) == 2


def test_precision_bf16_autocasts_and_keys_the_record():
    from dataclasses import replace

    from probes.settings import ProbeSettings

    settings = replace(TINY, steps=20, log_every=10, precision="bf16")
    cell = Cell("blur", 2, "staggered", 0)
    assert cell.key(settings).endswith("/w2/bf16")
    assert cell.key(replace(TINY, precision="fp32")).endswith("/w2")  # fp32 keys unchanged
    seen = []
    model = build_probe_model(cell, settings)
    model.blocks[0].attn.register_forward_hook(
        lambda mod, inp, out: seen.append((out.dtype, torch.is_autocast_enabled("cpu")))
    )
    import probes.runner as R
    from lab.machine.precision import autocast

    with autocast(next(model.parameters()).device, settings.precision):
        R.task_loss(model, cell, settings, torch.Generator().manual_seed(0)).backward()
    assert seen == [(torch.bfloat16, True)]
    rec = run_cell(cell, settings, progress=False)
    assert rec["settings"]["precision"] == "bf16" and alpha_drift(rec) > 0
    with pytest.raises(ValueError, match="precision='fp16'"):
        run_cell(cell, replace(settings, precision="fp16"), progress=False)
    assert ProbeSettings().precision == "auto"  # resolved per machine: tests/lab/test_precision.py


def test_auto_keys_a_cell_as_fp32_on_either_cpu(cpu_profile):
    """`auto` resolves to fp32 on both CPUs, so a grid's records from the two machines share
    keys (and resume each other) instead of splitting into fp32 and bf16 cells."""
    from dataclasses import replace

    cell = Cell("blur", 2, "staggered", 0)
    assert TINY.precision == "auto" and TINY.resolved().precision == "fp32"
    assert cell.key(TINY) == cell.key(replace(TINY, precision="fp32"))
    assert cell.key(TINY).endswith("/w2")


def test_grid_jobs_match_one_process(tmp_path, monkeypatch):
    """Two cells in two worker processes give the records a single process gives with the
    workers' thread count, appended to the file, in cell order, and resume like jobs=1.
    (The threads are pinned, `lab.machine.cpu_share`: other lab jobs on the machine would otherwise
    lower the workers' share, and with it the records' last bits.)"""
    import os
    from dataclasses import replace

    monkeypatch.setenv("FIBLAB_THREADS", str(max(1, len(os.sched_getaffinity(0)) // 2)))
    settings = replace(TINY, steps=12, log_every=6)
    cells = [Cell("blur", 2, "staggered", 0), Cell("fib-fixed", 2, "-", 1)]
    out = tmp_path / "jobs.jsonl"
    par = run_grid(cells, settings, str(out), progress=False, jobs=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // 2))
    try:
        seq = [run_cell(c, settings, progress=False) for c in cells]
    finally:
        torch.set_num_threads(threads)
    assert [r["key"] for r in par] == [c.key(settings) for c in cells]
    for a, b in zip(par, seq):
        assert a["alphas"] == b["alphas"] and a["acc"] == b["acc"] and a["loss"] == b["loss"]
    assert sorted(r["key"] for r in load_records(str(out))) == sorted(r["key"] for r in par)
    again = run_grid(cells, settings, str(out), progress=False, jobs=2)
    assert again == par  # read back, nothing retrained
    with pytest.raises(ValueError, match="jobs=0"):
        run_grid(cells, settings, None, progress=False, jobs=0)


def test_grid_jobs_stop_queueing_after_a_failing_cell(tmp_path):
    """A failing cell raises; queued cells never start; finished cells are kept on file."""
    from dataclasses import replace

    settings = replace(TINY, steps=40, log_every=20)  # ≈0.3 s a cell
    good = [Cell("fib-fixed", 2, "-", s) for s in range(8)]
    out = tmp_path / "fail.jsonl"
    with pytest.raises(ValueError, match="'gumbel'"):
        run_grid([Cell("gumbel", 2, "-", 0)] + good, settings, str(out), progress=False, jobs=2)
    kept = load_records(str(out))
    # the pool hands cells to its call queue ahead of time (jobs + 1 of them) and those still
    # run; the rest of the 8 never start
    assert len(kept) <= 2 * 2 + 1
    assert {r["key"] for r in kept} <= {c.key(settings) for c in good}
