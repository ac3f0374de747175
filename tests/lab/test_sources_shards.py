"""Multi-file and compressed sources: parquet shard folders and globs (what `datasets`'
to_parquet and the Hub write), Arrow folders in `datasets.Dataset.save_to_disk`'s layout
(written here with pyarrow: `datasets` is not installed and never imported), and .jsonl.gz.

The oracle for each: the equivalent single file holding the same rows in the same order. Both
must read to the same documents and prepare to the same train / val tokens.
"""

import gzip
import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lab.data.corpus import parse_source
from lab.data.prepared import prepare
from lab.data.tokenizer import BPETokenizer


def corpus(n=30, seed=0):
    rng = np.random.default_rng(seed)
    words = "alpha beta gamma delta eta theta iota kappa lambda mu".split()
    docs = [
        f"doc {i}: " + " ".join(rng.choice(words, size=int(rng.integers(5, 40)))) for i in range(n)
    ]
    docs[3] = "  \n\t"  # blank: skipped by every reader
    return docs


DOCS = corpus()
WANT = [d for d in DOCS if d.strip()]  # the hand-written expectation: blanks dropped, order kept


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(WANT * 3, 300)


def shards_of(rows, k):
    """rows cut into k consecutive parts (the last ones may be shorter)."""
    step = -(-len(rows) // k)
    return [rows[i : i + step] for i in range(0, len(rows), step)]


def write_parquet_shards(folder, rows, k, split="train", extra=None):
    folder.mkdir(parents=True, exist_ok=True)
    parts = shards_of(rows, k)
    for i, part in enumerate(parts):
        cols = {"text": part, "n": list(range(len(part)))}
        if extra:
            cols.update(extra)
        pq.write_table(pa.table(cols), folder / f"{split}-{i:05d}-of-{len(parts):05d}.parquet")
    return folder


def write_save_to_disk(folder, rows, k, column="text", stream=True):
    """The folder `datasets.Dataset.save_to_disk` writes: data-0000i-of-0000k.arrow (Arrow IPC
    stream format), dataset_info.json and state.json listing the data files in order."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = shards_of(rows, k)
    names = [f"data-{i:05d}-of-{len(parts):05d}.arrow" for i in range(len(parts))]
    for name, part in zip(names, parts):
        table = pa.table({column: part, "id": list(range(len(part)))})
        with pa.OSFile(str(folder / name), "wb") as sink:
            new = pa.ipc.new_stream if stream else pa.ipc.new_file
            with new(sink, table.schema) as w:
                for batch in table.to_batches(max_chunksize=4):  # several batches a file
                    w.write_batch(batch)
    (folder / "dataset_info.json").write_text(
        json.dumps({"features": {column: {"dtype": "string", "_type": "Value"}}})
    )
    state = {
        "_data_files": [{"filename": n} for n in names],
        "_fingerprint": "0123456789abcdef",
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": "train",
    }
    (folder / "state.json").write_text(json.dumps(state))
    return folder


def same_tokens(a, b):
    return np.array_equal(np.asarray(a.train), np.asarray(b.train)) and np.array_equal(
        np.asarray(a.val), np.asarray(b.val)
    )


# ------------------------------------------------------------------------------------ parquet


def test_parquet_shard_folder_and_glob_read_as_the_single_file(tmp_path, tok):
    pq.write_table(pa.table({"text": DOCS}), tmp_path / "one.parquet")
    folder = write_parquet_shards(tmp_path / "shards", DOCS, 4)
    one = parse_source(str(tmp_path / "one.parquet"))
    assert list(one.documents()) == WANT
    (folder / "README.md").write_text(
        "a note"
    )  # a folder with .txt/.md files reads them, as before
    assert parse_source(str(folder)).kind == "dir"
    (folder / "README.md").unlink()
    by_dir = parse_source(str(folder))
    by_glob = parse_source(f"{folder}/*.parquet")
    assert by_dir.kind == by_glob.kind == "parquet" and len(by_dir.shards) == 4
    assert list(by_dir.documents()) == WANT and list(by_glob.documents()) == WANT
    assert by_glob.pattern == f"{folder}/*.parquet" and "4 files" in by_glob.describe()
    kw = dict(cache_dir=tmp_path / "c", val_tokens=60, tokenizer=tok)
    ref = prepare(str(tmp_path / "one.parquet"), **kw)
    for spec in (str(folder), f"{folder}/*.parquet", f"{folder}/**/*.parquet"):
        got = prepare(spec, **kw)
        assert same_tokens(got, ref), spec
        assert got.meta["n_documents"] == ref.meta["n_documents"] == len(WANT)


def test_parquet_shards_named_column_recursive_and_in_path_order(tmp_path):
    rows = [f"row {i} text" for i in range(12)]
    folder = tmp_path / "hub" / "data"
    write_parquet_shards(folder / "b", rows[6:], 2)  # b/ after a/ by relative path
    write_parquet_shards(folder / "a", rows[:6], 3)
    for p in folder.rglob("*.parquet"):  # rename the column to body
        t = pq.read_table(p)
        pq.write_table(t.rename_columns(["body", "n"]), p)
    src = parse_source(f"{folder}:body")
    assert list(src.documents()) == rows
    assert [f.relative_to(folder).as_posix() for f in src.shards][:2] == [
        "a/train-00000-of-00003.parquet",
        "a/train-00001-of-00003.parquet",
    ]
    assert list(parse_source(f"{tmp_path}/hub/**/*.parquet:body").documents()) == rows
    with pytest.raises(ValueError, match="has no column 'text'.*body.*:COLUMN"):
        parse_source(str(folder))


def test_a_shard_folder_of_two_splits_is_refused_with_the_glob_to_use(tmp_path):
    folder = write_parquet_shards(tmp_path / "data", DOCS[:10], 2, split="train")
    write_parquet_shards(folder, DOCS[10:], 1, split="test")
    with pytest.raises(ValueError, match=r"several splits \['test', 'train'\].*train-\*\.parquet"):
        parse_source(str(folder))
    assert list(parse_source(f"{folder}/train-*.parquet").documents()) == WANT[:9]


def test_a_fingerprint_sees_every_shard(tmp_path):
    folder = write_parquet_shards(tmp_path / "s", DOCS, 3)
    before = parse_source(str(folder)).fingerprint()
    assert [f[0] for f in before["files"]] == sorted(p.name for p in folder.iterdir())
    last = sorted(folder.iterdir())[-1]
    pq.write_table(pa.table({"text": ["changed"], "n": [0]}), last)
    os.utime(last, ns=(1, 1))
    assert parse_source(str(folder)).fingerprint() != before


# ------------------------------------------------------------------------------------ arrow


@pytest.mark.parametrize("stream", [True, False], ids=["ipc-stream", "ipc-file"])
def test_save_to_disk_folder_reads_as_the_single_file(tmp_path, tok, stream):
    saved = write_save_to_disk(tmp_path / "saved", DOCS, 3, stream=stream)
    src = parse_source(str(saved))
    assert src.kind == "arrow" and [p.name for p in src.shards] == [
        f"data-0000{i}-of-00003.arrow" for i in range(3)
    ]
    assert list(src.documents()) == WANT
    with open(tmp_path / "one.jsonl", "w") as f:
        for d in DOCS:
            f.write(json.dumps({"text": d}) + "\n")
    kw = dict(cache_dir=tmp_path / "c", val_tokens=60, tokenizer=tok)
    assert same_tokens(prepare(str(saved), **kw), prepare(str(tmp_path / "one.jsonl"), **kw))
    assert "datasets" not in sys.modules  # read with pyarrow alone


def test_save_to_disk_follows_state_json_order_and_names_a_column(tmp_path):
    saved = write_save_to_disk(tmp_path / "saved", DOCS, 3, column="content")
    state = json.loads((saved / "state.json").read_text())
    state["_data_files"].reverse()  # the order is state.json's, not the names'
    (saved / "state.json").write_text(json.dumps(state))
    parts = shards_of(DOCS, 3)
    want = [d for part in reversed(parts) for d in part if d.strip()]
    assert list(parse_source(f"{saved}:content").documents()) == want
    with pytest.raises(
        ValueError, match="arrow file .*data-0000.-of-00003.arrow.*no column 'text'"
    ):
        parse_source(str(saved))


def test_arrow_folder_errors_name_the_path_and_the_fix(tmp_path):
    saved = write_save_to_disk(tmp_path / "ds" / "train", DOCS, 2)
    (tmp_path / "ds" / "dataset_dict.json").write_text(json.dumps({"splits": ["train"]}))
    with pytest.raises(ValueError, match=r"DatasetDict.*\['train'\].*ds/train"):
        parse_source(str(tmp_path / "ds"))
    (saved / "data-00001-of-00002.arrow").unlink()
    with pytest.raises(ValueError, match="lacks its data files.*data-00001-of-00002.arrow.*whole"):
        parse_source(str(saved))
    (saved / "state.json").write_text("{}")
    with pytest.raises(ValueError, match="state.json.*_data_files.*save_to_disk"):
        parse_source(str(saved))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(ValueError, match="x.arrow.*not a readable Arrow IPC file"):
        parse_source(str(bad))


# ------------------------------------------------------------------------------------ jsonl.gz


def test_jsonl_gz_reads_as_the_plain_jsonl(tmp_path, tok):
    lines = "".join(json.dumps({"body": d, "i": i}) + "\n" for i, d in enumerate(DOCS))
    (tmp_path / "x.jsonl").write_text(lines)
    with gzip.open(tmp_path / "x.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(lines)
    plain = parse_source(f"{tmp_path}/x.jsonl:body")
    gz = parse_source(f"{tmp_path}/x.jsonl.gz:body")
    assert gz.kind == "jsonl" and list(gz.documents()) == list(plain.documents()) == WANT
    kw = dict(cache_dir=tmp_path / "c", val_tokens=60, tokenizer=tok)
    assert same_tokens(
        prepare(f"{tmp_path}/x.jsonl.gz:body", **kw), prepare(f"{tmp_path}/x.jsonl:body", **kw)
    )
    # a folder of gzip shards, and a glob of them
    (tmp_path / "gz").mkdir()
    for i, part in enumerate(shards_of(DOCS, 3)):
        with gzip.open(tmp_path / "gz" / f"part{i}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.write("".join(json.dumps({"body": d}) + "\n" for d in part))
    assert list(parse_source(f"{tmp_path}/gz:body").documents()) == WANT
    assert list(parse_source(f"{tmp_path}/gz/*.jsonl.gz:body").documents()) == WANT


def test_bad_gzip_and_globs_name_the_path_and_the_fix(tmp_path):
    (tmp_path / "x.jsonl.gz").write_bytes(b"plain text, not gzip\n")
    with pytest.raises(ValueError, match="x.jsonl.gz.*not a complete gzip file.*gzip"):
        parse_source(str(tmp_path / "x.jsonl.gz"))
    whole = gzip.compress(b'{"text": "a"}\n' * 1000)
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match="cut.jsonl.gz.*not a complete gzip file"):
        list(parse_source(str(tmp_path / "cut.jsonl.gz")).documents())  # when parsed or read
    with pytest.raises(ValueError, match=r"glob '.*nothing-\*\.parquet' matches no file.*quote"):
        parse_source(f"{tmp_path}/nothing-*.parquet")
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "m.parquet")
    (tmp_path / "m.txt").write_text("b")
    with pytest.raises(
        ValueError, match=r"glob .*m\.\*' matches files of kinds \['.parquet', '.txt'\]"
    ):
        parse_source(f"{tmp_path}/m.*")
    with pytest.raises(ValueError, match="no .txt or .md file, nor .parquet"):
        (tmp_path / "empty").mkdir()
        parse_source(str(tmp_path / "empty"))


def test_text_glob_reads_each_file_as_one_document(tmp_path):
    for i, name in enumerate(["b.txt", "a.md", "c.txt"]):
        (tmp_path / name).write_text(f"file {name} {i}\n")
    src = parse_source(f"{tmp_path}/*.txt")
    assert list(src.documents()) == ["file b.txt 0\n", "file c.txt 2\n"]
    with pytest.raises(ValueError, match="take no ':' suffix"):
        parse_source(f"{tmp_path}/*.txt:text")
