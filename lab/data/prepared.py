"""The token cache: `prepare` tokenises a source once, `PreparedData` opens the result.

cache_dir/<source>-v<vocab>-<sha256 of source fingerprint + settings>/ holds tokenizer.json,
train.bin, val.bin and meta.json. Every file is written to a temporary name and moved into
place with os.replace; meta.json goes last and is the completeness marker, so a killed run
leaves no file that a later call trusts. A source's fingerprint includes the size and mtime
of its files, so editing a file makes a new cache entry. For a .bin source nothing is copied:
meta.json records the split and train/val are views of the source file. The split follows
`lab.data.heldout`; batches and evaluation windows come from `lab.data.sampling`.
Several processes preparing the same entry at once (the runs of a sweep, on one machine or on
nodes sharing the cache) take turns: the entry is built under a file lock beside it, and the
ones that waited reuse it.  (DDP ranks still let rank 0 call `prepare` first.)

One module of ≈ 470 lines on purpose: the entry's key, its build, its lock and its reader share
one invariant (meta.json last means complete), which is easier to keep true read in one place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lab.data.corpus import Source, parse_source
from lab.data.heldout import VAL_CAP, default_val_tokens, split_documents
from lab.data.sampling import Batches, batch_rng, check_window, window_batches, windows_at
from lab.data.tokenizer import (
    DEFAULT_VOCAB,
    BPETokenizer,
    check_train_vocab,
    read_tokens,
    resolve_tokenizer,
    split_pieces,
    token_dtype,
)
from lab.data.windows import n_windows
from lab.util.checks import nonneg_int, positive_int
from lab.util.files import atomic_path, exclusive_lock, is_temporary
from lab.util.progress import bytes_bar, reading

TOKENIZER_TRAIN_CHARS = 100_000_000  # text the BPE trainer sees at most (per prepare/mixture)
FORMAT = "fiblab-data-1"
_ENCODE_CHUNK_CHARS = 4 << 20  # text handed to one encode_batch call
_ENTRY_FILES = ("train.bin", "val.bin", "tokenizer.json", "tokenizer_config.json")


@dataclass
class PreparedData(Batches):
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
        check_window(n, seq_len, f"{split} split of {self.meta['source']}")
        batch_size = positive_int(batch_size, "batch_size")
        rng = batch_rng(seed, step, micro, rank)
        return rng.integers(0, n - seq_len - 1, size=batch_size)

    def windows(self, split: str, drawn: np.ndarray, seq_len: int) -> np.ndarray:
        return windows_at(self.tokens(split), drawn, seq_len)

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
        return window_batches(
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
    progress: bool = False,
) -> PreparedData:
    """Tokenise `source` once into cache_dir/<name>-<hash>/ and return it; reuse a complete
    entry made with the same source fingerprint and settings.

    vocab_size: BPE size to train (default 2048); with `tokenizer` (a tokenizer.json path or a
    BPETokenizer) it defaults to the tokenizer's size and must not be smaller; for a .bin
    source without a tokenizer it is required (the ids are checked to lie below it).
    val_tokens: held-out tokens (None: min(5%, 500K)); seed: picks the held-out documents.
    tokenizer_train_chars: the BPE trainer sees at most this much text (the first documents).
    progress: tqdm bars on stderr while the BPE reads its text and while tokenising (bytes/s).
    """
    src = parse_source(source)
    tok = resolve_tokenizer(tokenizer)
    seed = nonneg_int(seed, "seed")
    if val_tokens is not None:
        val_tokens = nonneg_int(val_tokens, "val_tokens")
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
    key = settings_hash(settings)
    out = Path(cache_dir) / f"{src.short_name()}-v{vocab_size}-{key[:16]}"
    try:
        data = PreparedData.load(out)
        data.reused = True
        return data
    except ValueError:
        pass
    with _building(out) as lock:  # one builder at a time (the runs of a sweep share entries)
        try:  # built by another process while this one waited
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
                    docs = capped_documents(src.documents(), tokenizer_train_chars, src)
                    tok = BPETokenizer.train(
                        reading(docs, f"BPE {src.short_name()}: reading text", progress), vocab_size
                    )
                meta = _prepare_text(src, out, vocab_size, val_tokens, seed, tok, progress)
            if tok is not None:
                tok.save(out / "tokenizer.json")
        except BaseException:
            _clear_partial(out)
            if not any(out.iterdir()):
                out.rmdir()
                if lock is not None:  # nothing left of the entry, its lock neither
                    lock.unlink(missing_ok=True)
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


def capped_documents(docs: Iterable[str], max_chars: int, what) -> Iterator[str]:
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


def _tokenising_bar(src: Source, progress: bool):
    """Bytes tokenised (MB/s); the total is known for text files only (the other kinds store
    more bytes than their text)."""
    total = sum(f.stat().st_size for f in src.files()) if src.kind in ("text", "dir") else None
    return bytes_bar(f"tokenising {src.short_name()}", total, progress)


def _prepare_text(src: Source, out: Path, vocab_size, val_tokens, seed, tok, progress) -> dict:
    dtype = token_dtype(vocab_size)
    if tok.vocab_size > vocab_size:
        raise ValueError(f"tokenizer has {tok.vocab_size} entries > vocab_size {vocab_size}")
    lengths: list[int] = []
    all_file = out / f"all.bin.tmp-{os.getpid()}"
    try:
        with open(all_file, "wb") as f, _tokenising_bar(src, progress) as bar:
            for ids in _encode_stream(src.documents(), tok, bar):
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


def _encode_stream(docs: Iterable[str], tok: BPETokenizer, bar=None) -> Iterator[np.ndarray]:
    """Each document's ids followed by the end-of-text id, encoded in parallel batches; `bar`
    (tqdm) advances by each batch's UTF-8 bytes once it is encoded."""
    batch, chars = [], 0
    done = {"docs": 0, "tokens": 0}

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
        if bar is not None and not bar.disable:
            done["docs"] += len(batch)
            done["tokens"] += sum(len(ids) for ids in enc) + len(batch)
            bar.set_postfix(docs=f"{done['docs']:,}", tokens=f"{done['tokens']:,}", refresh=False)
            bar.update(sum(len(d.encode("utf-8")) for d in batch))
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
    if tok is not None and top >= tok.vocab_size:
        raise ValueError(
            f"token file {str(src.path)!r} holds id {top}, outside the tokenizer's "
            f"{tok.vocab_size} entries: its ids come from another tokenizer; give the "
            f"tokenizer.json the file was made with"
        )
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


def settings_hash(obj) -> str:
    """sha256 (hex) of obj as sorted-key JSON: the key of a cache entry or a mixture tokenizer."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _write_json(path: Path, obj) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


@contextlib.contextmanager
def _building(out: Path) -> Iterator[Path | None]:
    """Hold an exclusive lock on ``out``'s entry while it is built: a second process (another
    run of a sweep, another node on the same shared cache) waits, then reuses the entry
    instead of clearing the first one's files.  The lock file sits beside the entry, so a
    failed build that removes the entry's folder leaves the lock usable; where no flock can be
    had (Windows, a file system without it) there is no lock.  Yields the lock file's path (None
    without a lock)."""
    lock = out.parent / f"{out.name}.lock"
    waiting = f"fiblab: waiting for another process that prepares {out}"
    with exclusive_lock(lock, waiting) as held:
        yield lock if held else None


def _clear_partial(out: Path) -> None:
    """A run killed mid-way may leave temp files or a stale meta-less entry: drop them."""
    (out / "meta.json").unlink(missing_ok=True)
    for p in out.iterdir():
        if ".tmp-" in p.name or is_temporary(p.name) or p.name in _ENTRY_FILES:
            p.unlink(missing_ok=True)
