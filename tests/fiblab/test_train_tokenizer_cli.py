"""`fiblab train --tokenizer` and docs/cli.md's mixed text / .bin example, end to end on tiny data:
four domains of a few KB (jsonl, parquet, txt, a .bin of ids), a byte-level BPE whose separator
is "</s>" (a Llama-like tokenizer made here), a few steps of the `tiny` preset.

Oracles: the tokenizer's own size and separator id, its hash read back from the run folder,
the embedding's row count in the checkpoint, the .bin's ids read straight from the file.
"""

import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from fiblab.cli import main
from lab.data.prepared import PreparedData
from lab.data.tokenizer import EOT, BPETokenizer
from lab.training.checkpoint import load_checkpoint

DOCS_DATA = "web=a.jsonl@0.35,wiki=b.parquet:text@0.22,stories=c.txt@0.2,math=d.bin@0.23"
TINY = ["--preset", "tiny", "--store", ""]
SMALL = ["--override", "val_tokens=200", "model.seq_len=32", "tokens_per_step=256"]
WORDS = (
    "the of and to in is was he that it for on with as his they at be this from have or by "
    "one had not but what all were when we there can an your which their said if do will"
).split()


def documents(n, seed):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(15, 50)))) + ".\n" for _ in range(n)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """docs/cli.md's four domains and a tokenizer.json with <s> / </s> (≤ 400 entries)."""
    d = tmp_path_factory.mktemp("readme")
    docs = documents(160, 0)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer)
    assert 300 < tok.get_vocab_size() <= 400  # the corpus's merges run out before 400
    tok.save(str(d / "tok.json"))
    with open(d / "a.jsonl", "w") as f:
        for doc in docs[:40]:
            f.write(json.dumps({"text": doc}) + "\n")
    pq.write_table(pa.table({"text": docs[40:80]}), d / "b.parquet")
    (d / "c.txt").write_text("".join(docs[80:120]))
    eos = tok.token_to_id("</s>")
    ids = [i for doc in docs[120:] for i in tok.encode(doc).ids + [eos]]
    np.asarray(ids, dtype=np.uint16).tofile(d / "d.bin")
    assert all(2_000 < os.path.getsize(d / n) < 12_000 for n in ("a.jsonl", "c.txt", "d.bin"))
    return d


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_readme_mixture_trains_with_a_tokenizer(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)  # the example's relative paths, as written
    rc, out, err = run(
        capsys,
        *["train", *TINY, "--name", "readme", "--steps", "3"],
        *["--data", DOCS_DATA, "--tokenizer", "tok.json", *SMALL],
    )
    assert rc == 0, err
    n = Tokenizer.from_file("tok.json").get_vocab_size()
    tok = BPETokenizer.load("tok.json")
    assert (tok.vocab_size, tok.eot, tok.eot_id) == (n, "</s>", 1)
    assert (
        f"tokenizer tok.json: {n} entries, end of text '</s>' (id 1); model vocab_size {n}" in out
    )
    assert "final held-out perplexity web " in out
    assert all(f"{name} " in out.splitlines()[-1] for name in ("wiki", "stories", "math"))
    assert "tokenising a" in err and "B/s" in err  # the tqdm bars, with throughput
    cfg = json.loads((folder / "runs" / "readme" / "config.json").read_text())
    assert cfg["tokenizer"] == "tok.json" and cfg["model"]["vocab_size"] == n
    # the run folder holds the tokenizer used; the model has exactly its rows
    assert BPETokenizer.load("runs/readme/tokenizer.json").sha256() == tok.sha256()
    ckpt = load_checkpoint(sorted(glob.glob("runs/readme/ckpt_*.pt"))[-1])
    assert tuple(ckpt["model"]["embed.weight"].shape) == (n, 32)
    # the .bin domain is the file's own ids (a view, not re-tokenised); the text domains carry
    # one separator per document
    entries = {p.split(os.sep)[-2].split("-")[0]: p for p in glob.glob("runs/data/*/meta.json")}
    math = PreparedData.load(os.path.dirname(entries["d"]))
    ids = np.fromfile("d.bin", dtype=np.uint16)
    assert math.meta["tokens_file"] == str(folder / "d.bin")
    assert np.array_equal(np.concatenate([math.train, math.val]), ids)
    web = PreparedData.load(os.path.dirname(entries["a"]))
    both = np.concatenate([web.train, web.val])
    assert web.meta["n_documents"] == 40 and int((both == 1).sum()) in (39, 40)  # one may be cut


def test_rerun_from_config_reuses_tokenizer_and_data(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)
    if not (folder / "runs" / "readme" / "config.json").exists():
        pytest.skip("needs the docs example run above")
    before = sorted(os.listdir("runs/data"))
    rc, out, err = run(
        capsys,
        *["train", "--config", "runs/readme/config.json", "--name", "again", "--steps", "2"],
        *["--store", "", "--quiet"],
    )
    assert rc == 0, err
    assert sorted(os.listdir("runs/data")) == before  # nothing tokenised again
    assert "tokenising" not in err and "step/s" not in err  # --quiet: no bars
    same = BPETokenizer.load("runs/again/tokenizer.json").sha256()
    assert same == BPETokenizer.load("tok.json").sha256()


def test_without_a_tokenizer_the_bin_domain_says_what_to_pass(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)
    rc, out, err = run(capsys, "train", *TINY, "--name", "no-tok", "--data", DOCS_DATA, *SMALL)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert "['math']" in lines[0] and "--tokenizer" in lines[0] and "trains a BPE" in lines[0]
    assert not os.path.exists("runs/no-tok")


def test_bin_ids_beyond_the_tokenizer_are_one_line(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)
    n = Tokenizer.from_file("tok.json").get_vocab_size()
    np.arange(450, dtype=np.uint16).tofile("big.bin")  # ids up to 449 ≥ n entries
    rc, out, err = run(
        capsys,
        *["train", *TINY, "--name", "big", "--tokenizer", "tok.json"],
        *["--data", "web=a.jsonl@0.5,big=big.bin@0.5", *SMALL],
    )
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert (
        "big.bin" in lines[0] and f"holds id 449, outside the tokenizer's {n} entries" in lines[0]
    )


def test_text_only_mixture_without_a_tokenizer_trains_one_on_all_domains(folder, monkeypatch):
    from lab.training.dataload import load_data
    from lab.training.trainconfig import make_config

    monkeypatch.chdir(folder)
    over = {"data": "web=a.jsonl@0.5,wiki=b.parquet:text@0.5", "val_tokens": 200}
    data = load_data(make_config("tiny", {**over, "model.seq_len": 32}))
    assert data.tokenizer.eot == EOT and data.vocab_size == 512
    assert {d.tokenizer.sha256() for d in data.domains.values()} == {data.tokenizer.sha256()}


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("web=a.jsonl@x", "weight 'x' is not a number"),
        ("web=a.jsonl@1,web=c.txt@1", "domain 'web' is named twice"),
        ("web=a.jsonl", "write name=source@weight"),
    ],
)
def test_bad_mixture_specs_are_one_line(folder, capsys, monkeypatch, spec, needle):
    monkeypatch.chdir(folder)
    rc, out, err = run(capsys, "train", *TINY, "--name", "bad", "--data", spec, *SMALL)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_resume_with_another_tokenizer_is_refused(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)
    if not (folder / "runs" / "readme" / "config.json").exists():
        pytest.skip("needs the docs example run above")
    other = folder / "other"
    other.mkdir(exist_ok=True)
    (other / "tokenizer.json").write_text((folder / "tok.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<s>"}))  # same file,
    rc, out, err = run(  # another separator: other token ids
        capsys,
        *["train", *TINY, "--name", "readme", "--steps", "4", "--resume"],
        *["--data", DOCS_DATA, "--tokenizer", "other/tokenizer.json", *SMALL],
    )
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert "runs/readme was trained with another tokenizer" in lines[0] and "--config" in lines[0]
    assert sorted(glob.glob("runs/readme/ckpt_*.pt")) == ["runs/readme/ckpt_0000003.pt"]
    assert "tokenising" not in err  # refused before any work
