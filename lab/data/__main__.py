"""``python -m lab.data [SOURCE] [--vocab 2048] [--cache-dir runs/data]``: prepare a source's token
cache (`lab.data.prepared.prepare`) and print its summary as JSON."""

from __future__ import annotations

import argparse
import sys
import time

from lab.data.prepared import prepare
from lab.util import jsonio


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
