"""Data pipeline: sources, byte-level BPE, the token cache, held-out split, batches, mixtures.

Tokenizers here are trained on at most ~200 KB of text at vocab 300-512, so the file runs in a
few seconds. Statistical checks use fixed seeds (deterministic) with five-binomial-sigma bounds,
which a correct sampler would miss with probability < 1e-6 for a fresh seed.
"""

import json
import math
import os

import numpy as np
import pytest
import torch

from lab.data import prepared
from lab.data.corpus import bible_documents, parse_source
from lab.data.heldout import split_documents
from lab.data.mixture import PAPER_MIXTURE_WEIGHTS, Mixture, paper_mixture
from lab.data.prepared import prepare
from lab.data.tokenizer import (
    EOT,
    BPETokenizer,
    read_tokens,
    split_pieces,
    token_dtype,
    write_tokens,
)

TRICKY = (
    "héllo wörld — “quotes” 🎉 日本語\r\n\ttab  two spaces\n\n\n   trailing   \n"
    f"a literal {EOT} inside text\x00\x7f 'tis we've 1234567 +-*/"
)


@pytest.fixture(scope="module")
def chapters():
    return list(bible_documents())


@pytest.fixture(scope="module")
def bible_tok(chapters):
    sample = chapters[::12]  # ~100 chapters, ~350 KB...
    sample = sample[:60]  # ...cut to ~200 KB
    assert 100_000 < sum(map(len, sample)) < 300_000
    return BPETokenizer.train(sample, 512)


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def small_corpus(n_docs=40, seed=0):
    """Distinct little documents of real words (cheap to tokenise)."""
    rng = np.random.default_rng(seed)
    words = "the of and to in a is that for it as was with be by on not he I this".split()
    return [
        f"Document {i}.\n" + " ".join(rng.choice(words, size=int(rng.integers(20, 120)))) + "\n"
        for i in range(n_docs)
    ]


def token_source(tmp_path, n, vocab=1000, seed=0, name="t.bin"):
    ids = np.random.default_rng(seed).integers(0, vocab, size=n)
    return write_tokens(tmp_path / name, ids, vocab), ids


# ------------------------------------------------------------------------------- corpus, tokenizer


def test_bible_documents(chapters):
    assert len(chapters) == 1189  # chapters of the KJV
    assert chapters[0].startswith("Genesis 1\n\nIn the beginning God created the heaven")
    assert chapters[-1].startswith("Revelation 22\n\n")
    assert len(list(bible_documents("book"))) == 66
    assert 4_000_000 < sum(map(len, chapters)) < 4_300_000


def test_tokenizer_round_trip_on_bible(bible_tok, chapters):
    assert bible_tok.vocab_size == 512 and bible_tok.eot_id == 0
    held = chapters[5::12][:60]  # chapters the trainer did not see
    for text in held + [TRICKY]:
        ids = bible_tok.encode(text)
        assert bible_tok.decode(ids) == text
        assert max(ids) < 512
    assert len(bible_tok.encode(held[0])) < 0.5 * len(held[0].encode())  # it did learn merges
    # a literal "<|endoftext|>" in text is text; the id only comes from the pipeline
    assert bible_tok.eot_id not in bible_tok.encode(TRICKY)
    assert bible_tok.decode([bible_tok.eot_id]) == EOT


def test_tokenizer_save_load_and_determinism(bible_tok, chapters, tmp_path):
    bible_tok.save(tmp_path / "tok.json")
    again = BPETokenizer.load(tmp_path / "tok.json")
    assert again.encode(chapters[7]) == bible_tok.encode(chapters[7])
    assert BPETokenizer.train(chapters[::12][:60], 512).to_str() == bible_tok.to_str()


def test_split_pieces_changes_no_token(bible_tok, chapters):
    rng = np.random.default_rng(3)
    glue = ["\n", "\n\n", " \n", "\n ", "\r\n", "\t\n", ".\n", "\n\n\n  "]
    text = "".join(c[:400] + glue[int(rng.integers(len(glue)))] for c in chapters[:150])
    pieces = split_pieces(text, size=500)
    assert "".join(pieces) == text and len(pieces) > 10
    assert [i for p in pieces for i in bible_tok.encode(p)] == bible_tok.encode(text)
    assert bible_tok.encode_document(text).tolist() == bible_tok.encode(text)


# ------------------------------------------------------------------------------- token files


def test_token_dtype_selection():
    assert token_dtype(2048) == np.uint16
    assert token_dtype(32768) == np.uint16  # the paper's vocab: ids 0..32767
    assert token_dtype(65536) == np.uint16  # ids up to 65535 still fit
    assert token_dtype(65537) == np.uint32
    assert np.iinfo(token_dtype(32768)).max >= 32767
    with pytest.raises(ValueError, match="2\\*\\*32"):
        token_dtype(2**32 + 1)


@pytest.mark.parametrize("vocab", [32768, 70000])
def test_bin_write_read_round_trip(tmp_path, vocab):
    ids = np.random.default_rng(0).integers(0, vocab, size=10_001)
    ids[:2] = [0, vocab - 1]
    path = write_tokens(tmp_path / "x.bin", ids, vocab)
    dtype = token_dtype(vocab)
    assert path.stat().st_size == ids.size * dtype.itemsize  # flat, no header
    back = read_tokens(path, dtype)
    assert back.dtype == dtype and np.array_equal(back, ids)
    assert not list(tmp_path.glob("*.tmp-*"))  # the temp file was moved into place


# ------------------------------------------------------------------------------- sources


def test_source_kinds(tmp_path):
    docs = small_corpus(6)
    write(tmp_path / "a.txt", docs[0])
    write(tmp_path / "d" / "z.md", docs[2])
    write(tmp_path / "d" / "sub" / "b.txt", docs[1])
    write(tmp_path / "d" / "ignored.csv", "x,y\n")
    write(tmp_path / "d" / "blank.txt", " \n\t\n")
    (tmp_path / "x.jsonl").write_text(
        "\n".join(json.dumps({"body": d, "n": i}) for i, d in enumerate(docs)) + "\n\n"
    )
    assert list(parse_source(str(tmp_path / "a.txt")).documents()) == [docs[0]]
    src = parse_source(str(tmp_path / "d"))
    assert src.kind == "dir"
    assert list(src.documents()) == [docs[1], docs[2]]  # sub/b.txt < z.md; blank skipped
    assert list(parse_source(f"{tmp_path}/x.jsonl:body").documents()) == docs
    write_tokens(tmp_path / "t.bin", np.arange(10), 100)
    assert parse_source(str(tmp_path / "t.bin")).dtype == "uint16"
    assert parse_source(f"{tmp_path}/t.bin:uint32").dtype == "uint32"
    assert parse_source("bible").kind == "bible"


def test_parquet_source(tmp_path):
    pytest.importorskip("pyarrow")
    import pandas as pd

    docs = small_corpus(5)
    pd.DataFrame({"content": docs + [None], "id": range(6)}).to_parquet(tmp_path / "x.parquet")
    assert list(parse_source(f"{tmp_path}/x.parquet:content").documents()) == docs
    with pytest.raises(ValueError, match="'text'.*content"):
        parse_source(str(tmp_path / "x.parquet"))  # default column "text" is absent


# ------------------------------------------------------------------------------- prepare, cache


def test_prepare_split_is_exact_and_documents_whole(tmp_path, bible_tok):
    docs = small_corpus(40)
    for i, d in enumerate(docs):
        write(tmp_path / "src" / f"{i:03d}.txt", d)
    data = prepare(
        str(tmp_path / "src"), cache_dir=tmp_path / "c", val_tokens=300, seed=5, tokenizer=bible_tok
    )
    # the stream the pipeline splits: each document's ids then <|endoftext|>
    units = [bible_tok.encode(d) + [bible_tok.eot_id] for d in docs]
    stream = np.concatenate(units)
    assert data.meta["n_tokens"] == len(stream) == len(data.train) + len(data.val)
    assert len(data.val) == 300 and data.vocab_size == 512 and data.dtype == np.uint16
    train_segs, val_segs, n_val = split_documents([len(u) for u in units], 300, 5)
    assert np.array_equal(data.train, np.concatenate([stream[a:b] for a, b in train_segs]))
    assert np.array_equal(data.val, np.concatenate([stream[a:b] for a, b in val_segs]))
    # val is whole documents plus the tail of one: at most one EOT-less run at its start
    text = data.decode(data.val)
    assert text.count(EOT) in (n_val, n_val - 1) and text.endswith(EOT)
    assert data.meta["val_documents"] == n_val >= 2
    other = prepare(
        str(tmp_path / "src"), cache_dir=tmp_path / "c", val_tokens=300, seed=6, tokenizer=bible_tok
    )
    assert other.path != data.path and not np.array_equal(other.val, data.val)


def test_single_document_holds_out_its_tail():
    train, val, n = split_documents([1000], 70, seed=1)
    assert train == [(0, 930)] and val == [(930, 1000)] and n == 1
    train, val, n = split_documents([10, 20, 30, 40], 100, seed=0)
    assert val == [(0, 100)] and train == [] and n == 4


def test_prepare_reuses_cache(tmp_path, monkeypatch):
    write(tmp_path / "corpus.txt", "".join(small_corpus(60)))
    kw = dict(vocab_size=300, cache_dir=tmp_path / "c", val_tokens=500, seed=0)
    first = prepare(str(tmp_path / "corpus.txt"), **kw)
    assert not first.reused and first.tokenizer.vocab_size <= 300
    files = {p.name: p.stat().st_mtime_ns for p in first.path.iterdir()}
    assert set(files) == {"train.bin", "val.bin", "tokenizer.json", "meta.json"}

    def boom(*a, **k):
        raise AssertionError("retokenised")

    monkeypatch.setattr(prepared, "_encode_stream", boom)
    monkeypatch.setattr(BPETokenizer, "train", boom)
    second = prepare(str(tmp_path / "corpus.txt"), **kw)
    assert second.reused and second.path == first.path
    assert {p.name: p.stat().st_mtime_ns for p in second.path.iterdir()} == files
    assert np.array_equal(second.train, first.train) and np.array_equal(second.val, first.val)
    # meta.json is the completeness marker: without it the entry is rebuilt
    monkeypatch.undo()
    (first.path / "meta.json").unlink()
    (first.path / "train.bin.tmp-999").write_bytes(b"half")  # debris of a killed run
    third = prepare(str(tmp_path / "corpus.txt"), **kw)
    assert not third.reused and np.array_equal(third.train, first.train)
    assert not list(third.path.glob("*.tmp-*"))
    # an edited source is a new entry
    write(tmp_path / "corpus.txt", "".join(small_corpus(61)))
    assert prepare(str(tmp_path / "corpus.txt"), **kw).path != first.path


def test_prepare_token_file_is_not_copied(tmp_path):
    path, ids = token_source(tmp_path, 5000, vocab=1000)
    data = prepare(str(path), vocab_size=1000, cache_dir=tmp_path / "c")
    assert len(data.val) == 250  # 5% default
    assert np.array_equal(data.train, ids[:4750]) and np.array_equal(data.val, ids[4750:])
    assert sorted(p.name for p in data.path.iterdir()) == ["meta.json"]
    assert prepare(str(path), vocab_size=1000, cache_dir=tmp_path / "c").reused
    wide = write_tokens(tmp_path / "w.bin", ids.astype(np.uint32), 70000)  # stored as uint32
    data32 = prepare(f"{wide}:uint32", vocab_size=1000, cache_dir=tmp_path / "c")
    assert data32.dtype == np.uint32 and np.array_equal(data32.train, ids[:4750])


# ------------------------------------------------------------------------------- batches


@pytest.fixture
def tokdata(tmp_path):
    path, _ = token_source(tmp_path, 20_000, vocab=1000, seed=1)
    return prepare(str(path), vocab_size=1000, cache_dir=tmp_path / "c", val_tokens=3001)


def test_get_batch_deterministic(tokdata):
    args = dict(split="train", batch_size=8, seq_len=64, seed=3)
    x, y = tokdata.get_batch(step=10, **args)
    assert x.shape == y.shape == (8, 64) and x.dtype == y.dtype == torch.int64
    x2, y2 = tokdata.get_batch(step=10, **args)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    for other in (dict(step=11), dict(step=10, micro=1), dict(step=10, rank=1)):
        xo, _ = tokdata.get_batch(**{**args, **other})
        assert not torch.equal(x, xo), other
    xs, _ = tokdata.get_batch(**{**args, "seed": 4}, step=10)
    assert not torch.equal(x, xs)
    # it is a pure function of the numbers: the documented generator reproduces the starts
    starts = np.random.default_rng([3, 10, 0, 0]).integers(0, len(tokdata.train) - 65, size=8)
    assert np.array_equal(tokdata.draw(step=10, **args), starts)


def test_windows_are_real_slices(tokdata):
    raw = np.asarray(tokdata.val, dtype=np.int64)
    T = 100
    for step in range(5):
        starts = tokdata.draw("val", 16, T, seed=0, step=step)
        x, y = tokdata.get_batch("val", 16, T, seed=0, step=step)
        assert starts.min() >= 0 and starts.max() < len(raw) - T - 1
        assert torch.equal(x[:, 1:], y[:, :-1])
        for b, s in enumerate(starts):
            assert torch.equal(x[b], torch.from_numpy(raw[s : s + T]))
            assert torch.equal(y[b], torch.from_numpy(raw[s + 1 : s + T + 1]))


def test_starts_cover_the_range_uniformly(tokdata):
    n, T = len(tokdata.val), 2900  # 100 legal starts: [0, n-T-1)
    starts = np.concatenate([tokdata.draw("val", 64, T, seed=0, step=s) for s in range(100)])
    assert starts.min() == 0 and starts.max() == n - T - 2
    counts = np.bincount(starts, minlength=n - T - 1)  # 6400 draws over 100 bins, mean 64
    assert counts.min() > 64 - 5 * 8 and counts.max() < 64 + 5 * 8


@pytest.mark.parametrize("T", [1, 7, 100, 1000, 3000])
def test_eval_windows_cover_floor(tokdata, T):
    raw = np.asarray(tokdata.val, dtype=np.int64)  # n = 3001
    xs, ys = zip(*tokdata.eval_windows("val", T, batch_size=7))
    x, y = torch.cat(xs), torch.cat(ys)
    count = (len(raw) - 1) // T
    assert len(x) == count == tokdata.n_eval_windows("val", T)
    assert torch.equal(x.flatten(), torch.from_numpy(raw[: count * T]))
    assert torch.equal(y.flatten(), torch.from_numpy(raw[1 : count * T + 1]))
    limited = sum(len(b[0]) for b in tokdata.eval_windows("val", T, batch_size=2, limit=3))
    assert limited == min(3, count)


# ------------------------------------------------------------------------------- mixtures


def test_mixture_sampling_follows_weights(tmp_path):
    weights = {"a": 0.5, "b": 0.3, "c": 0.15, "d": 0.05}
    spec = {}
    for k, name in enumerate(weights):
        path, _ = token_source(tmp_path, 3000 + 1000 * k, vocab=500, seed=k, name=f"{name}.bin")
        spec[name] = (str(path), weights[name] * 4)  # unnormalised weights are fine
    mix = Mixture.prepare(spec, vocab_size=500, cache_dir=tmp_path / "c", val_tokens=400)
    assert np.allclose(mix.probs, list(weights.values()))
    dom = np.concatenate([mix.draw("train", 64, 32, seed=1, step=s)[0] for s in range(300)])
    N = len(dom)  # 19,200 draws
    for k, p in enumerate(weights.values()):
        assert abs(np.mean(dom == k) - p) < 5 * math.sqrt(p * (1 - p) / N), (k, p)
    # rows are real windows of their own domain
    dom, starts = mix.draw("train", 32, 20, seed=2, step=7)
    x, y = mix.get_batch("train", 32, 20, seed=2, step=7)
    for b in range(32):
        raw = np.asarray(mix.domains[mix.names[dom[b]]].train, dtype=np.int64)
        assert starts[b] < len(raw) - 21
        assert torch.equal(x[b], torch.from_numpy(raw[starts[b] : starts[b] + 20]))
        assert torch.equal(y[b], torch.from_numpy(raw[starts[b] + 1 : starts[b] + 21]))
    x2, _ = mix.get_batch("train", 32, 20, seed=2, step=7)
    assert torch.equal(x, x2)
    assert sum(len(b[0]) for b in mix.eval_windows("c", 50)) == (400 - 1) // 50


def test_mixture_text_domains_share_one_tokenizer(tmp_path):
    a = write(tmp_path / "a.txt", "".join(small_corpus(30, seed=1)))
    b = write(tmp_path / "b" / "x.md", "".join(small_corpus(30, seed=2)).upper())
    mix = Mixture.prepare(
        {"low": (str(a), 0.7), "up": (str(b.parent), 0.3)},
        vocab_size=300,
        cache_dir=tmp_path / "c",
        val_tokens=100,
    )
    shas = {d.tokenizer.sha256() for d in mix.domains.values()}
    assert shas == {mix.tokenizer.sha256()}
    assert all(len(d.val) == 100 for d in mix.domains.values())
    # upper-case text got merges too: the tokenizer was trained on both domains
    up = mix.tokenizer.encode("THE OF AND")
    assert len(up) < len("THE OF AND")
    again = Mixture.prepare(
        {"low": (str(a), 0.7), "up": (str(b.parent), 0.3)},
        vocab_size=300,
        cache_dir=tmp_path / "c",
        val_tokens=100,
    )
    assert all(d.reused for d in again.domains.values())


def test_paper_mixture_names():
    assert PAPER_MIXTURE_WEIGHTS == {
        "fineweb_edu": 0.35,
        "wikipedia": 0.22,
        "tinystories": 0.20,
        "math": 0.23,
    }
    with pytest.raises(ValueError, match="missing \\['math'"):
        paper_mixture({"fineweb_edu": "a", "wikipedia": "b", "tinystories": "c"})


# ------------------------------------------------------------------------------- bad input


def test_bad_sources_name_the_value(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(ValueError, match="nope.txt.*does not exist"):
        prepare(str(missing), cache_dir=tmp_path / "c")
    write(tmp_path / "x.csv", "a,b\n")
    with pytest.raises(ValueError, match="unknown source kind.*x.csv"):
        parse_source(str(tmp_path / "x.csv"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty.txt.*empty"):
        parse_source(str(tmp_path / "empty.txt"))
    write(tmp_path / "blank.md", "  \n\n\t ")
    with pytest.raises(ValueError, match="blank.md.*no text"):
        prepare(str(tmp_path / "blank.md"), vocab_size=300, cache_dir=tmp_path / "c")
    assert not any((tmp_path / "c").iterdir())  # no half entry left behind
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(ValueError, match="emptydir.*no .txt or .md"):
        parse_source(str(tmp_path / "emptydir"))
    (tmp_path / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    with pytest.raises(ValueError, match="latin1.txt.*UTF-8"):
        prepare(str(tmp_path / "latin1.txt"), vocab_size=300, cache_dir=tmp_path / "c")
    (tmp_path / "x.jsonl").write_text(json.dumps({"body": "hi"}) + "\n")
    with pytest.raises(ValueError, match="no field 'text'.*body"):
        parse_source(str(tmp_path / "x.jsonl"))
    with pytest.raises(ValueError, match="no field 'txt'"):
        parse_source(f"{tmp_path}/x.jsonl:txt")


def test_unreadable_file(tmp_path, monkeypatch):
    """A file the OS refuses to open is one clear ValueError.  The refusal is a monkeypatched
    PermissionError, not chmod 0 (root, as in CI, reads files whatever their mode)."""
    import builtins

    from lab.data import corpus

    p = write(tmp_path / "secret.txt", "text")
    folder = write(tmp_path / "docs" / "a.txt", "fine").parent
    refused = {str(p), str(write(folder / "secret.txt", "text"))}
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):
        if os.fspath(file) in refused:
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(corpus, "open", refusing_open, raising=False)  # lab.data.corpus's open only
    with pytest.raises(ValueError, match="secret.txt.*cannot be read.*Permission denied"):
        parse_source(str(p))
    with pytest.raises(ValueError, match="secret.txt.*cannot be read.*Permission denied"):
        parse_source(str(folder))  # one unreadable file of a folder names that file


def test_bad_vocab_and_lengths(tmp_path, tokdata):
    path, _ = token_source(tmp_path, 1000, vocab=300, name="small.bin")
    with pytest.raises(ValueError, match="vocab_size 70000.*uint16.*small.bin"):
        prepare(str(path), vocab_size=70000, cache_dir=tmp_path / "c")
    with pytest.raises(ValueError, match="holds id 2.. >= vocab_size 200"):
        prepare(str(path), vocab_size=200, cache_dir=tmp_path / "c")
    with pytest.raises(ValueError, match="needs vocab_size"):
        prepare(str(path), cache_dir=tmp_path / "c")
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    with pytest.raises(ValueError, match="odd.bin.*3 bytes"):
        parse_source(str(tmp_path / "odd.bin"))
    with pytest.raises(ValueError, match="val_tokens 1000 >= the 1000 tokens"):
        prepare(str(path), vocab_size=300, cache_dir=tmp_path / "c", val_tokens=1000)
    with pytest.raises(ValueError, match="vocab_size 100 is too small"):
        prepare("bible", vocab_size=100, cache_dir=tmp_path / "c")
    n = len(tokdata.val)  # 3001
    with pytest.raises(ValueError, match=f"seq_len {n - 1} is too long.*{n} tokens"):
        tokdata.get_batch("val", 2, n - 1, seed=0, step=0)
    tokdata.get_batch("val", 2, n - 2, seed=0, step=0)  # n = T + 2: one legal start
    with pytest.raises(ValueError, match=f"seq_len {n} is too long"):
        next(tokdata.eval_windows("val", n))
    with pytest.raises(ValueError, match="split 'test'"):
        tokdata.get_batch("test", 2, 8, seed=0, step=0)
    with pytest.raises(ValueError, match="step=-1 must be an integer >= 0"):
        tokdata.get_batch("train", 2, 8, seed=0, step=-1)
