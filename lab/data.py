"""Language-model data in one import: sources, tokeniser, token cache, held-out split, mixtures.

Each piece is a module of its own, whose docstring states its rule:
    lab.corpus     text sources and the source-spec grammar (`parse_source`, `Source`)
    lab.tokenizer  the byte-level BPE tokeniser and flat token files (`BPETokenizer`)
    lab.prepared   the token cache (`prepare`, `PreparedData`)
    lab.heldout    the held-out split per source (`split_documents`, `default_val_tokens`)
    lab.sampling   seeded training batches and evaluation windows (`batch_rng`)
    lab.mixture    weighted domains (`Mixture`, `paper_mixture`)
The names below (`__all__`) are re-exported here, so `from lab.data import prepare` keeps working.

    python -m lab.data [SOURCE] [--vocab 2048] [--cache-dir runs/data]   prepare and summarise
"""

from __future__ import annotations

import argparse
import sys
import time

from lab import jsonio
from lab.corpus import Source, parse_source
from lab.heldout import PAPER_VAL_TOKENS, VAL_CAP, VAL_FRACTION, default_val_tokens, split_documents
from lab.mixture import PAPER_MIXTURE_WEIGHTS, Mixture, paper_mixture
from lab.prepared import FORMAT, TOKENIZER_TRAIN_CHARS, PreparedData, prepare
from lab.sampling import batch_rng
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

__all__ = [
    "BPETokenizer",
    "DEFAULT_VOCAB",
    "FORMAT",
    "Mixture",
    "PAPER_MIXTURE_WEIGHTS",
    "PAPER_VAL_TOKENS",
    "PreparedData",
    "Source",
    "TOKENIZER_TRAIN_CHARS",
    "VAL_CAP",
    "VAL_FRACTION",
    "atomic_path",
    "batch_rng",
    "check_train_vocab",
    "default_val_tokens",
    "main",
    "n_windows",
    "paper_mixture",
    "parse_source",
    "positive_int",
    "prepare",
    "read_tokens",
    "resolve_tokenizer",
    "split_documents",
    "split_pieces",
    "token_dtype",
    "window_starts",
]


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
            args.source,
            args.vocab,
            args.cache_dir,
            args.val_tokens,
            args.seed,
            args.tokenizer,
            progress=True,
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
