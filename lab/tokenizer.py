"""The tokeniser and token files: a byte-level BPE (`BPETokenizer`), the "<|endoftext|>"
separator, the vocabulary constants, and flat header-less .bin files of ids (`token_dtype`,
`write_tokens`, `read_tokens`).

`BPETokenizer.train(texts, vocab_size)`: HF `tokenizers` byte-level BPE (ByteLevel pre-tokenizer
and decoder, no prefix space, no normalisation), so decode(encode(s)) == s for any string. One
special token, "<|endoftext|>" (id 0), separates documents; it is inserted by the pipeline only:
text that contains the literal string is encoded as ordinary bytes. Ids are stored as uint16
when the vocabulary has at most 65,536 entries, else uint32.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

EOT = "<|endoftext|>"
DEFAULT_VOCAB = 2048
PAPER_VOCAB = 32768
MIN_VOCAB = 257  # 256 byte symbols + <|endoftext|>
_PIECE_CHARS = 1 << 20  # long documents are encoded in pieces of about this size


# ------------------------------------------------------------------------------------ dtypes


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id < vocab_size fits 16 bits (vocab ≤ 65,536), else uint32."""
    vocab_size = positive_int(vocab_size, "vocab_size")
    if vocab_size <= 1 << 16:
        return np.dtype(np.uint16)
    if vocab_size <= 1 << 32:
        return np.dtype(np.uint32)
    raise ValueError(f"vocab_size {vocab_size} does not fit uint32 token ids; use at most 2**32")


def write_tokens(path: str | Path, tokens, vocab_size: int) -> Path:
    """Write ids as a flat header-less .bin (dtype from vocab_size), atomically."""
    dtype = token_dtype(vocab_size)
    arr = np.asarray(tokens)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= vocab_size):
        raise ValueError(
            f"token ids span [{int(arr.min())}, {int(arr.max())}], outside "
            f"[0, vocab_size={vocab_size}); pass the tokenizer's vocab size"
        )
    path = Path(path)
    with atomic_path(path) as tmp:
        arr.astype(dtype, copy=False).tofile(tmp)
    return path


def read_tokens(path: str | Path, dtype=np.uint16) -> np.ndarray:
    """Memory-map a flat .bin of ids (read-only). An empty file gives an empty array."""
    path, dtype = Path(path), np.dtype(dtype)
    if not path.is_file():
        raise ValueError(f"token file {str(path)!r} does not exist; check the path")
    size = path.stat().st_size
    if size % dtype.itemsize:
        raise ValueError(
            f"token file {str(path)!r} has {size} bytes, not a multiple of "
            f"{dtype.itemsize} ({dtype.name}); is it {_other_dtype(dtype)}?"
        )
    if size == 0:
        return np.empty(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def _other_dtype(dtype: np.dtype) -> str:
    return "uint32" if dtype == np.uint16 else "uint16"


# ------------------------------------------------------------------------------------ tokenizer


class BPETokenizer:
    """Byte-level BPE (HF `tokenizers`) with "<|endoftext|>" as its only special token."""

    def __init__(self, tok):
        from tokenizers import Tokenizer

        if not isinstance(tok, Tokenizer):
            raise TypeError("BPETokenizer wraps a tokenizers.Tokenizer")
        eot = tok.token_to_id(EOT)
        if eot is None:
            raise ValueError(
                f"tokenizer has no {EOT!r} token; train one with "
                f"BPETokenizer.train or add the special token"
            )
        tok.encode_special_tokens = True  # a literal "<|endoftext|>" in text is just text
        self.tok, self.eot_id = tok, eot

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB, *, min_frequency: int = 2
    ) -> BPETokenizer:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        vocab_size = check_train_vocab(vocab_size)
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=[EOT],
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator(_pieces_of(texts), trainer)
        return cls(tok)

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        from tokenizers import Tokenizer

        path = Path(path)
        if not path.is_file():
            raise ValueError(
                f"tokenizer file {str(path)!r} does not exist; give a local "
                f"tokenizer.json or omit it to train one"
            )
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:
            raise ValueError(
                f"tokenizer file {str(path)!r} is not a tokenizers JSON ({e})"
            ) from None
        return cls(tok)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        with atomic_path(path) as tmp:
            tmp.write_text(self.to_str(), encoding="utf-8")
        return path

    def to_str(self) -> str:
        return self.tok.to_str()

    def sha256(self) -> str:
        return hashlib.sha256(self.to_str().encode()).hexdigest()

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        fast = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        return [e.ids for e in fast(list(texts), add_special_tokens=False)]

    def decode(self, ids) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return self.tok.decode(ids, skip_special_tokens=False)

    def encode_document(self, text: str) -> np.ndarray:
        """Ids of one document; long ones are encoded in pieces cut where no pre-token can
        cross (see `split_pieces`), so the ids equal a one-shot encode."""
        ids = self.encode_batch(split_pieces(text))
        return np.fromiter((i for p in ids for i in p), dtype=np.int64)


def split_pieces(text: str, size: int = _PIECE_CHARS) -> list[str]:
    """Cut text into ~size-char pieces just after a newline that follows a non-space character
    and precedes one; the GPT-2 pre-tokenizer regex never joins across such a point (the newline
    is a pre-token of its own there), so tokenising the pieces separately changes nothing."""
    if len(text) <= size:
        return [text]
    out, start = [], 0
    while len(text) - start > size:
        cut = start + size
        while cut < len(text):
            cut = text.find("\n", cut)
            if cut < 0 or cut + 1 >= len(text):
                cut = len(text)
                break
            if cut > start and not text[cut - 1].isspace() and not text[cut + 1].isspace():
                cut += 1
                break
            cut += 1
        if cut >= len(text):
            break
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def _pieces_of(texts: Iterable[str]) -> Iterator[str]:
    for t in texts:
        yield from split_pieces(t)


def check_train_vocab(vocab_size) -> int:
    vocab_size = positive_int(vocab_size, "vocab_size")
    if vocab_size < MIN_VOCAB:
        raise ValueError(
            f"vocab_size {vocab_size} is too small for byte-level BPE: it needs at "
            f"least {MIN_VOCAB} (256 bytes + {EOT}); use e.g. 512 or {DEFAULT_VOCAB}"
        )
    token_dtype(vocab_size)
    return vocab_size


def resolve_tokenizer(tokenizer) -> BPETokenizer | None:
    if tokenizer is None or isinstance(tokenizer, BPETokenizer):
        return tokenizer
    return BPETokenizer.load(tokenizer)


# ------------------------------------------------------------------------------------ helpers


def positive_int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} {v!r} must be a positive integer")
    return int(v)


def nonneg_int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise ValueError(f"{name} {v!r} must be an integer >= 0")
    return int(v)


class atomic_path:
    """with atomic_path(path) as tmp: write tmp; it replaces path only if the block succeeds."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")

    def __enter__(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            with open(self.tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)
        return False
