"""The tokeniser and token files: `BPETokenizer` (the lab's byte-level BPE, or any Hugging Face
fast tokenizer file), the end-of-text separator, the vocabulary constants, and flat header-less
.bin files of ids (`token_dtype`, `write_tokens`, `read_tokens`).

`BPETokenizer.train(texts, vocab_size)`: HF `tokenizers` byte-level BPE (ByteLevel pre-tokenizer
and decoder, no prefix space, no normalisation), so decode(encode(s)) == s for any string. One
special token, "<|endoftext|>" (id 0), separates documents; it is inserted by the pipeline only:
text that contains the literal string is encoded as ordinary bytes. Ids are stored as uint16
when the vocabulary has at most 65,536 entries, else uint32.

`BPETokenizer.load(path)` opens any `tokenizers` JSON (a Llama / GPT-2 / BERT tokenizer.json,
WordPiece, BPE or Unigram). Its document separator (`eot`) is, in this order: the `eot=`
argument, the `eos_token` of a tokenizer_config.json beside the file (as the Hugging Face Hub
ships it), else the first of `EOT_CANDIDATES` the vocabulary holds (special tokens first).
Encoding never adds the tokenizer's own special tokens (no <s>, [CLS]), so a document is its
text's ids followed by the separator.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from lab.util.checks import positive_int
from lab.util.files import atomic_path

EOT = "<|endoftext|>"
#: separators looked for in a tokenizer without a tokenizer_config.json (GPT-2, Llama 3, Llama 2 /
#: T5 / Mistral, Gemma, Llama 3 chat, ChatML, BERT)
EOT_CANDIDATES = (EOT, "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "<|im_end|>", "[SEP]")
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
    """A `tokenizers.Tokenizer` and its document separator (`eot`, id `eot_id`): the lab's
    byte-level BPE (`train`, separator "<|endoftext|>") or any tokenizer file (`load`)."""

    def __init__(self, tok, eot: str | None = None):
        from tokenizers import Tokenizer

        if not isinstance(tok, Tokenizer):
            raise TypeError("BPETokenizer wraps a tokenizers.Tokenizer")
        eot = find_eot(tok, eot)
        tok.encode_special_tokens = True  # a literal "<|endoftext|>" in text is just text
        self.tok, self.eot, self.eot_id = tok, eot, tok.token_to_id(eot)

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
    def load(cls, path: str | Path, eot: str | None = None) -> BPETokenizer:
        """Any `tokenizers` JSON file; the separator as the module doc says."""
        from tokenizers import Tokenizer

        path = Path(path).expanduser()
        if path.is_dir() and (path / "tokenizer.json").is_file():
            path = path / "tokenizer.json"  # a model folder
        if not path.is_file():
            raise ValueError(
                f"tokenizer file {str(path)!r} does not exist; give a local "
                f"tokenizer.json or omit it to train one"
            )
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:
            raise ValueError(
                f"tokenizer file {str(path)!r} is not a tokenizers JSON ({e}); give a Hugging "
                f"Face fast tokenizer's tokenizer.json"
            ) from None
        if eot is None:
            eot = config_eos(path.with_name(CONFIG_FILE))
        try:
            return cls(tok, eot)
        except ValueError as e:
            raise ValueError(f"tokenizer file {str(path)!r}: {e}") from None

    def save(self, path: str | Path) -> Path:
        """tokenizer.json; and the separator as eos_token of a tokenizer_config.json beside it
        (its other keys kept) when the file alone, or a config already there, would name
        another one: so `load` of the copy gives this tokenizer."""
        path = Path(path)
        with atomic_path(path) as tmp:
            tmp.write_text(self.to_str(), encoding="utf-8")
        try:
            alone = find_eot(self.tok)
        except ValueError:
            alone = None
        beside = path.with_name(CONFIG_FILE)
        if config_eos(beside) not in (None, self.eot) or (
            alone != self.eot and config_eos(beside) is None
        ):
            try:
                conf = json.loads(beside.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                conf = {}
            conf = {**(conf if isinstance(conf, dict) else {}), "eos_token": self.eot}
            with atomic_path(beside) as tmp:
                tmp.write_text(json.dumps(conf, indent=1) + "\n")
        return path

    def to_str(self) -> str:
        return self.tok.to_str()

    def sha256(self) -> str:
        """Of the tokenizer's JSON, and of its separator when that is not "<|endoftext|>"
        (so the hash of every tokenizer made before separators could differ is unchanged)."""
        text = self.to_str() if self.eot == EOT else f"{self.to_str()}\neot={self.eot}"
        return hashlib.sha256(text.encode()).hexdigest()

    def describe(self) -> str:
        """ "32,000 entries, end of text '</s>' (id 2)": what a run prints about its tokenizer."""
        return f"{self.vocab_size:,} entries, end of text {self.eot!r} (id {self.eot_id})"

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


CONFIG_FILE = "tokenizer_config.json"


def config_eos(path: Path) -> str | None:
    """The `eos_token` of a tokenizer_config.json (a string or {"content": …}); None when the
    file or the key is missing or unreadable."""
    try:
        eos = json.loads(Path(path).read_text(encoding="utf-8")).get("eos_token")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(eos, dict):
        eos = eos.get("content")
    return eos if isinstance(eos, str) and eos else None


def find_eot(tok, eot: str | None = None) -> str:
    """The document separator of a `tokenizers.Tokenizer`: `eot` when given (it must be in the
    vocabulary), else the first of EOT_CANDIDATES that is a special token, else the first that
    is in the vocabulary at all."""
    if eot is not None:
        if tok.token_to_id(eot) is None:
            raise ValueError(
                f"end-of-text token {eot!r} is not in the tokenizer's vocabulary; name one "
                f"it has (tokenizer_config.json eos_token)"
            )
        return eot
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    found = [c for c in EOT_CANDIDATES if c in special]
    found += [c for c in EOT_CANDIDATES if tok.token_to_id(c) is not None]
    if found:
        return found[0]
    raise ValueError(
        f"the tokenizer has no end-of-text token to separate documents (none of "
        f"{', '.join(EOT_CANDIDATES)}); name its separator as eos_token in a "
        f"{CONFIG_FILE} beside the tokenizer.json, or add one of these as a special token"
    )


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
