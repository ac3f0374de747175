"""Every notebook in notebooks/ runs top to bottom headlessly at the smoke scale (FIBLAB_SMOKE=1)
with no error output, and the committed files carry no outputs (see notebooks/README.md)."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from fixture_store import smoke_store

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
WIDGET = "application/vnd.jupyter.widget-view+json"


def test_the_front_door_notebooks_exist():
    names = {p.name for p in NOTEBOOKS}
    assert {
        "01_coverage_explorer.ipynb",
        "02_retrieval_probes.ipynb",
        "03_train_lm.ipynb",
        "04_alpha_trajectories.ipynb",
        "05_results.ipynb",
        "06_schedule_search.ipynb",
    } <= names


def _as_git_has_it(path) -> str:
    """The notebook as git would commit it (the index, after the clean filter), not the working
    file: JupyterLab autosaves outputs there while a researcher uses the lab.  Outside a git
    checkout (an unpacked sdist), the file itself."""
    rel = path.resolve().relative_to(ROOT).as_posix()
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "show", f":{rel}"], capture_output=True, text=True
        )
    except OSError:
        done = None
    if done is None or done.returncode != 0:
        return path.read_text(encoding="utf-8")
    return done.stdout


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = nbformat.reads(_as_git_has_it(path), as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", (
        "set the kernelspec to python3 (a Select Kernel dialog appears otherwise)"
    )
    assert "widgets" not in nb.metadata, "widget state saved: strip it (notebooks/README.md)"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{path.name} cell {i} has outputs: run `make strip-notebooks`"
            )


@pytest.fixture(scope="module")
def smoke_env(tmp_path_factory):
    """FIBLAB_SMOKE=1 and a private store and runs folder, inherited by the kernels."""
    d = tmp_path_factory.mktemp("nb")
    (d / "runs").mkdir()
    corpus = tmp_path_factory.getbasetemp() / "fiblab-tiny-data"  # tokenised once per session
    from lab.data.prepared import prepare

    prepare("bible", vocab_size=512, cache_dir=str(corpus))
    os.symlink(corpus, d / "runs" / "data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIBLAB_SMOKE", "1")
        mp.setenv("FIBLAB_STORE", str(d / "store.db"))
        mp.setenv("FIBLAB_RUNS", str(d / "runs"))
        mp.setenv("OMP_NUM_THREADS", "1")
        mp.setenv("MPLBACKEND", "Agg")
        yield d


def _run(path: Path) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_top_to_bottom_at_smoke_scale(path, smoke_env, monkeypatch):
    if path.name.startswith(("04_", "05_")):  # the result notebooks read a synthetic store
        monkeypatch.setenv("FIBLAB_STORE", smoke_store(str(smoke_env / f"{path.stem}.db")))
    nb = _run(path)
    from fiblab.ui.nbstrip import strip  # `make strip-notebooks` turns the executed

    stripped = nbformat.writes(strip(copy.deepcopy(nb)))  # notebook back into the committed one
    assert stripped.strip() == path.read_text(encoding="utf-8").strip()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs if o.output_type == "error"]
    assert not errors, errors
    stderr = "".join(
        o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stderr"
    )
    assert "Traceback" not in stderr and "Error" not in stderr, stderr[-2000:]
    if path.name.startswith(("01_", "02_", "03_", "04_", "05_", "06_")):  # each shows its panel
        assert any(WIDGET in o.get("data", {}) for o in outputs), "no widget displayed"
    if path.name.startswith("02_"):
        from lab.store import Store

        with Store(smoke_env / "store.db") as st:
            probes = st.probes()
        assert len(probes) and set(probes["mechanism"]) == {"learned"}
    if path.name.startswith("03_"):  # launched from a cell, finished
        text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        assert "done | tiny: done at step 8/8" in text, text
        from lab.store import Store

        with Store(smoke_env / "store.db") as st:
            run = st.runs().set_index("name").loc["tiny"]
            loss = st.metrics("tiny", names=["loss"])
            evals = st.evals("tiny")
        assert run.status == "done" and sorted(loss["step"]) == list(range(1, 9))
        assert (evals["kind"] == "recompute").any()
        assert os.path.exists(smoke_env / "runs" / "tiny" / "launch.log")
    if path.name.startswith("05_"):  # the scale study as committed, in its verdicts' words
        md = "".join(o.get("data", {}).get("text/markdown", "") for o in outputs)
        import base64

        from analysis.experiments.study import scale_verdicts as SV
        from analysis.experiments.study.scale_protocol import RESULTS_DIR

        png = os.path.join(RESULTS_DIR, SV.FIGURE)
        figure = None  # the trend figure inline once decided: the committed PNG's own bytes
        if SV.committed()["trend"].get("cells"):
            with open(png, "rb") as f:
                figure = "data:image/png;base64," + base64.b64encode(f.read()).decode()
        assert SV.report(SV.committed(), figure=figure, title=False) in md
    if path.name.startswith("06_"):  # a 6-trial search launched from a cell, finished
        text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        assert "6 / 6 trials; best distinct" in text, text
        from lab.store import Store

        with Store(smoke_env / "store.db") as st:
            runs = st.runs()
        assert (runs["kind"] == "search").sum() == 6
        assert os.path.exists(smoke_env / "runs" / "searches" / "linear-distinct-s0" / "study.db")


def test_the_git_filter_strips_what_jupyterlab_autosaves(tmp_path):
    """A notebook with outputs, widget state and counts goes through the clean filter
    (`python -m fiblab.ui.nbstrip --stdin`) stripped; a stripped one comes out byte-identical."""
    committed = NOTEBOOKS[0].read_text(encoding="utf-8")
    nb = nbformat.reads(committed, as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="autosaved\n")]
    code.execution_count = 7
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    run = lambda text: (
        subprocess.run(
            [sys.executable, "-m", "fiblab.ui.nbstrip", "--stdin"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    )
    assert run(nbformat.writes(nb)) == committed
    assert run(committed) == committed


def test_notebook_02_says_the_steps_each_task_and_scale_train():
    """Issue 42 item 4: the markdown said `tiny` is 150 steps while the panel showed 120 for the
    shift task; it now gives each task's steps per scale, read here against `TASK_SCALES`."""
    import re

    from probes.settings import TASK_SCALES

    nb = nbformat.read(ROOT / "notebooks" / "02_retrieval_probes.ipynb", as_version=4)
    text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown").replace("\n", " ")
    said = {
        scale: {t: int(n.replace(",", "")) for t, n in re.findall(r"(\w+) ([\d,]+)", steps)}
        for scale, steps in re.findall(r"`(\w+)`[^(`]*\(steps: ([^;)]*)", text)
    }
    assert set(said) == {"paper", "quick", "tiny"}, said
    for scale, steps in said.items():
        assert steps == {t: TASK_SCALES[t][scale].steps for t in TASK_SCALES}, scale
    assert "(150 steps)" not in text
