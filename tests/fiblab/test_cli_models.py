"""`fiblab export` and `fiblab sample` on a real tiny trained run: the export loads to the
checkpoint's logits with the data cache gone, carries the run's tokenizer and the store's final
perplexity (what training returned), sampling a run and its export prints the same text, and a
bad folder is exit 2 with one line."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import shutil
import sys

import pytest
import torch

from fiblab.cli import main
from lab.data.tokenizer import BPETokenizer
from lab.lm.generate import generate
from lab.lm.model import FibLM
from lab.publish.export import run_model
from lab.publish.pretrained import from_pretrained, load_tokenizer, read_card
from lab.training.checkpoint import latest_good_checkpoint
from lab.training.train import train
from lab.training.trainconfig import config_from_file, make_config

WORDS = "in the beginning god created heaven and earth light darkness water day night".split()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """runs/tiny-export: the tiny preset (learned α, vocab 512) trained 2 steps on a small text
    file, with its store; returns (runs folder, train()'s summary)."""
    runs = tmp_path_factory.mktemp("runs")
    rng = random.Random(0)
    text = runs / "text.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(1500)))
    over = {"run_dir": str(runs), "data": str(text), "steps": 2, "ckpt_every": 2}
    cfg = make_config("tiny", {**over, "eval_every": 0, "name": "tiny-export"})
    summary = train(cfg, store_path=str(runs / "fiblab.db"), quiet=True)
    return runs, summary


def run(capsys, *argv):
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's refusals, as the command line is read
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _one_error_line(rc, err, needle):
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and re.match(r"fiblab( [a-z-]+)?: error: ", lines[0]), err
    assert needle in lines[0], lines[0]


def test_export_reads_no_data_and_loads_to_the_checkpoints_logits(trained, tmp_path, capsys):
    runs, summary = trained
    data = runs / "data"
    hidden = runs / "data-hidden"
    data.rename(hidden)  # export must not need the training data (nor re-tokenise it)
    try:
        rc, out, err = run(
            capsys, "export", "tiny-export", "--runs", runs, "--out", tmp_path / "m",
            "--store", runs / "fiblab.db",
        )  # fmt: skip
    finally:
        hidden.rename(data)
    assert rc == 0, err
    assert out.strip() == str(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "README.md", "config.json", "model.safetensors", "tokenizer.json",
    ]  # fmt: skip
    ckpt = latest_good_checkpoint(str(runs / "tiny-export"))
    ref = FibLM(config_from_file(str(runs / "tiny-export" / "config.json")).model)
    ref.load_state_dict(ckpt["model"])
    ref.eval()
    back = from_pretrained(tmp_path / "m")
    ids = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(0))
    assert torch.equal(back(ids)[0], ref(ids)[0])
    assert back.alphas() == ref.alphas() == summary["alphas"]  # the trained α, not the init
    run_tok = BPETokenizer.load(runs / "tiny-export" / "tokenizer.json")
    assert load_tokenizer(tmp_path / "m").sha256() == run_tok.sha256()
    card = read_card(tmp_path / "m")
    assert (card.name, card.steps, card.total_steps) == ("tiny-export", 2, 2)
    assert card.data.endswith("text.txt")
    assert card.perplexity == pytest.approx(summary["final_ppl"], rel=1e-9)  # what train said
    readme = (tmp_path / "m" / "README.md").read_text()
    ((name, ppl),) = summary["final_ppl"].items()
    assert f"{name} {ppl:.3f} at T=64" in readme


def test_export_of_a_run_folder_without_a_store_has_no_perplexity(trained, tmp_path, capsys):
    runs, _ = trained
    rc, out, err = run(
        capsys, "export", runs / "tiny-export", "--out", tmp_path / "m",
        "--store", tmp_path / "absent.db",
    )  # fmt: skip
    assert rc == 0, err
    assert not (tmp_path / "absent.db").exists()  # an absent store is not created
    assert read_card(tmp_path / "m").perplexity == {}
    assert "| held-out perplexity | not recorded |" in (tmp_path / "m" / "README.md").read_text()


def test_sample_a_run_and_its_export_print_the_same_text(trained, tmp_path, capsys):
    runs, _ = trained
    assert (
        run(capsys, "export", runs / "tiny-export", "--out", tmp_path / "m", "--store", "")[0] == 0
    )
    args = ["--prompt", "in the beginning", "--max-new-tokens", "9", "--seed", "3"]
    rc, from_run, err = run(capsys, "sample", "tiny-export", "--runs", runs, *args)
    assert rc == 0, err
    assert "9 tokens in" in err and "tokens/s" in err
    rc, from_export, err = run(capsys, "sample", tmp_path / "m", *args)
    assert rc == 0, err
    assert from_export == from_run and from_run.startswith("in the beginning")
    # the same as the API with the defaults the command documents (temperature 0.8, top-k 50)
    tok = load_tokenizer(tmp_path / "m")
    ids = torch.tensor([tok.encode("in the beginning")])
    out = generate(from_pretrained(tmp_path / "m"), ids, 9, temperature=0.8, top_k=50, seed=3)
    assert out.shape[1] == ids.shape[1] + 9
    assert from_run == tok.decode(out[0].tolist()) + "\n"


def test_greedy_sample_is_deterministic_whatever_the_seed(trained, capsys):
    runs, _ = trained
    base = [
        "sample",
        runs / "tiny-export",
        "--prompt",
        "day",
        "--temperature",
        "0",
        "--max-new-tokens",
        "8",
    ]
    a = run(capsys, *base, "--seed", "1")
    b = run(capsys, *base, "--seed", "2")
    assert a[0] == b[0] == 0 and a[1] == b[1]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["sample", "{tmp}/nowhere", "--prompt", "x"], "is neither a folder nor a run"),
        (["sample", "{tmp}", "--prompt", "x"], "config.json is missing"),
        (["export", "nope", "--runs", "{tmp}", "--out", "{tmp}/m"], "'nope' is neither"),
        (["export", "{tmp}", "--out", "{tmp}/m"], "is not a training run folder"),
        (["export", "{run}/config.json", "--out", "{tmp}/m"], "is a file, not a run folder"),
        (["sample", "{run}", "--top-k", "-1"], "argument --top-k: '-1' must be an integer >= 0"),
        (["sample", "{run}", "--max-new-tokens", "-2"], "'-2' must be an integer >= 1"),
        (["sample", "{run}", "--temperature", "-1"], "argument --temperature: '-1' must be a"),
        (["export", "{run}", "--out", "{run}"], "is the run folder itself"),
    ],
)
def test_bad_input_is_exit_2_with_one_line(trained, tmp_path, capsys, argv, needle):
    runs, _ = trained
    sub = {"{tmp}": str(tmp_path), "{run}": str(runs / "tiny-export")}
    argv = [next((a.replace(k, v) for k, v in sub.items() if k in a), a) for a in argv]
    rc, _, err = run(capsys, *argv)
    _one_error_line(rc, err, needle)


def test_sample_on_a_damaged_export_is_exit_2(trained, tmp_path, capsys):
    runs, _ = trained
    assert (
        run(capsys, "export", runs / "tiny-export", "--out", tmp_path / "m", "--store", "")[0] == 0
    )
    cfg = tmp_path / "m" / "config.json"
    doc = json.loads(cfg.read_text())
    doc["model"]["d_model"] = 64
    cfg.write_text(json.dumps(doc))
    rc, _, err = run(capsys, "sample", tmp_path / "m")
    _one_error_line(rc, err, "does not fit")


def test_export_refuses_to_overwrite_another_run_folder(trained, tmp_path, capsys):
    runs, _ = trained
    other = tmp_path / "other"  # a run folder before its first checkpoint: config.json only
    other.mkdir()
    shutil.copy(runs / "tiny-export" / "config.json", other)
    before = (other / "config.json").read_text()
    rc, _, err = run(capsys, "export", runs / "tiny-export", "--out", other, "--store", "")
    _one_error_line(rc, err, "holds another config.json")
    assert (other / "config.json").read_text() == before


def test_hf_without_lab_hf_says_so(trained, tmp_path, capsys, monkeypatch):
    runs, _ = trained
    monkeypatch.setitem(
        sys.modules, "lab.publish.hf", None
    )  # as if this fiblab had no lab.publish.hf
    rc, _, err = run(capsys, "export", runs / "tiny-export", "--out", tmp_path / "h", "--hf")
    _one_error_line(rc, err, "--hf needs lab.publish.hf")
    assert not (tmp_path / "h").exists()


def test_export_refuses_an_out_folder_with_checkpoints(trained, tmp_path, capsys):
    runs, _ = trained
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(runs / "tiny-export" / "ckpt_0000002.pt", other)
    rc, _, err = run(capsys, "export", runs / "tiny-export", "--out", other, "--hf")
    _one_error_line(rc, err, "is a run folder (it holds checkpoints)")


def test_hf_export_loads_in_transformers_with_the_runs_logits(
    trained, tmp_path, capsys, monkeypatch
):
    pytest.importorskip("transformers")
    if importlib.util.find_spec("lab.publish.hf") is None:
        pytest.skip("lab.publish.hf is absent")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    runs, _ = trained
    rc, out, err = run(capsys, "export", runs / "tiny-export", "--out", tmp_path / "h", "--hf")
    assert rc == 0, err
    from lab.publish.hf import load_hf

    ref = run_model(str(runs / "tiny-export")).model
    ids = torch.randint(0, 512, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = load_hf(tmp_path / "h")(ids).logits
        want = ref(ids)[0]
    assert (got - want).abs().max().item() <= 1e-4
    assert (tmp_path / "h" / "tokenizer.json").is_file()
