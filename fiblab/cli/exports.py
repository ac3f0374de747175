"""Results out: ``--log tensorboard`` for train / probe, and ``fiblab export-store``.

Nothing heavy is imported at the top (``fiblab --help`` stays torch-free): `lab.training.sinks` is
plain Python; the store and the replay are imported inside the command.
"""

from __future__ import annotations

import os

from fiblab.cli.argtypes import store_arg
from lab.training.sinks import KINDS, LogSpec, default_logdir
from lab.util import paths
from lab.util.wording import plural


def add_log_options(s) -> None:
    """``--log`` / ``--logdir`` on a subcommand that trains (train, probe)."""
    s.add_argument(
        "--log",
        choices=KINDS,
        default=None,
        help="also log scalars live (loss, lr, grad norm, tokens/s, held-out ppl, α per layer, "
        "probe accuracy) as TensorBoard event files, one folder per run or probe cell under "
        "--logdir; the store is written either way (default: no live log)",
    )
    s.add_argument(
        "--logdir",
        default=None,
        help=f"folder of the live log, for `tensorboard --logdir` (default: {default_logdir()})",
    )


def log_spec(args):
    """The `lab.training.sinks.LogSpec` the options ask for, or None without ``--log``."""
    kind, logdir = getattr(args, "log", None), getattr(args, "logdir", None)
    if kind is None:
        if logdir is not None:
            raise ValueError(f"--logdir {logdir} needs --log tensorboard (what to write there)")
        return None
    return LogSpec(kind, logdir or default_logdir())


def add_export_store(sub) -> None:
    s = sub.add_parser(
        "export-store",
        help="write runs already in the store as TensorBoard event files",
        description="Write runs of the experiment store as TensorBoard event files, with the "
        "tags, steps and (where the store has them) wall times of live logging; one fresh "
        "folder per run, so exporting again replaces, not duplicates.",
    )
    s.add_argument("runs", nargs="*", metavar="RUN", help="run names (default: every run)")
    s.add_argument(
        "--tensorboard",
        required=True,
        metavar="DIR",
        help="folder to write into, one subfolder per run (then: tensorboard --logdir DIR)",
    )
    s.add_argument(
        "--store",
        type=store_arg,
        default=paths.store_path(),
        help="experiment store (FIBLAB_STORE sets it)",
    )
    s.set_defaults(fn=cmd_export_store)


def cmd_export_store(args) -> int:
    from lab.store import Store
    from lab.training.replay import replay

    if not os.path.exists(args.store):
        raise ValueError(
            f"experiment store {args.store!r} does not exist: train or probe something "
            f"first, or pass --store"
        )
    spec = LogSpec("tensorboard", args.tensorboard)
    with Store(args.store) as store:
        written = replay(store, spec, args.runs or None)
    print(
        f"wrote {plural(len(written), 'run')} ({plural(sum(written.values()), 'scalar')}) to "
        f"{args.tensorboard}; "
        f"view them with: tensorboard --logdir {args.tensorboard}"
    )
    return 0
