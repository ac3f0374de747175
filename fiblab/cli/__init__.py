"""`fiblab` command line.

fiblab demo [--scale full|smoke|study|study-smoke] [--out DIR]    the main job (see README)
fiblab report [RUN ...] --out reports/NAME [--json]     tables + figures of runs in the store
fiblab eval RUN_DIR [--factors 1 2 4 8]                 perplexity, extrapolation, position bins
fiblab battery RUN [RUN ...] [--n 100] [--seed 0]       RULER / LEGO battery of runs, into the store
fiblab efficiency [--preset probe-small] [--measure]    attention FLOPs, keys/query, tokens/s
fiblab selfcheck [--preset paper-60m] [--seq-len 1024]   build the model, run every path
fiblab offsets --alpha 0.5 --window 8 [--base pow2] [--rounding floor] [--interp]
fiblab schedule stagger --layers 16 [--window 8] [--seq-len 1024] [--sets]
fiblab params [--preset paper-60m] [--schedule learned]
fiblab coverage --layers 16 --window 8 --rungs 15 --seq-len 1024 --schedule stagger [--json]
fiblab receptive-field --layers 16 --schedule coprime [--residual 0.5] [--json]
fiblab probe marked --depths 2 4 8 --init uniform staggered --seeds 0 1 [--scale quick] [--jobs 2] [--precision bf16] [--ray local]
fiblab sweep sweeps/cpu-matrix.toml [--ray local|auto|HOST:PORT] [--runs DIR]   LM runs as Ray tasks
fiblab train --preset cpu-stagger [--data bible] [--steps N] [--override key=value ...] [--resume] [--restart]
fiblab train --config runs/NAME/config.json [--name NEW] [--override key=value ...]   re-run / vary a run
fiblab export RUN --out DIR [--hf]                     safetensors model folder (or transformers Llama)
fiblab sample RUN_OR_DIR --prompt TEXT [--max-new-tokens 64]   text from a trained model
fiblab export-store --tensorboard DIR [RUN ...]         runs in the store as TensorBoard events
fiblab doctor [--json]                                  this machine, the lab's choices, expected times
"""

# (The docstring above is `fiblab --help`.)  `main` is here: it parses (`fiblab.cli.parser`
# builds the whole command tree), calls the command's handler, and turns a user's bad input into
# one line and exit code 2.  Every command with real work has a module of its own (train, probe,
# demo, report, measure, search, doctor, …).

from __future__ import annotations

import sqlite3
import sys
import warnings

from fiblab.cli.parser import build_parser


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """The lab's own warnings ("fiblab: …") as one plain line; others as Python prints them."""
    if str(message).startswith("fiblab:"):
        return f"{message}\n"
    return _PLAIN_FORMAT(message, category, filename, lineno, line)


_PLAIN_FORMAT = warnings.formatwarning


def os_error_line(e: OSError) -> str:
    """One line for a file-system error: the path, the reason, the fix."""
    if e.filename is None:
        return f"{e}: check the paths given (or the defaults: FIBLAB_STORE, FIBLAB_RUNS)"
    return (
        f"{e.filename!r}: {e.strerror or e}; check the path (its folder must exist or be "
        f"creatable, and writable), or pass another"
    )


def main(argv: list[str] | None = None) -> int:
    previous, warnings.formatwarning = warnings.formatwarning, _format_warning
    try:
        args = build_parser().parse_args(argv)
        try:
            return args.fn(args)
        except ValueError as e:
            print(f"fiblab: error: {e}", file=sys.stderr)
            return 2
        except OSError as e:  # a path given (or defaulted) that cannot be read or written
            print(f"fiblab: error: {os_error_line(e)}", file=sys.stderr)
            return 2
        except sqlite3.DatabaseError as e:
            print(
                f"fiblab: error: the experiment store cannot be used ({e}): pass --store with "
                f"a fiblab store (a new path makes one), or '' to skip it",
                file=sys.stderr,
            )
            return 2
    finally:
        warnings.formatwarning = previous


if __name__ == "__main__":
    sys.exit(main())
