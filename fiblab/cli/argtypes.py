"""Argument types shared by the subcommands."""

from __future__ import annotations

import argparse
import os

STORE_HELP = "experiment store ('' to skip; FIBLAB_STORE sets it)"
RUNS_HELP = "folder for run directories and probe results (FIBLAB_RUNS sets it)"


def base_arg(text: str):
    if text in ("fib", "pow2"):
        return text
    try:
        return tuple(float(x) if "." in x else int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"base {text!r}: use fib, pow2 or a comma list like 1,3,9"
        ) from None


def schedule_arg(text: str):
    """An argparse type: a schedule's name, or one α a layer as a comma list (0.5,1,1.5)."""
    if "," not in text:
        return text
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"schedule {text!r}: use a name (fixed, stagger, …) or one α a layer, e.g. 0.5,1,1.5"
        ) from None


def scheme_arg(among=None, what: str = "scheme"):
    """An argparse type: any spelling of a `lab.ladder.schemes` scheme (limited to ``among``), as its
    canonical name ("stagger" and "fib/stagger" give "fib-stagger")."""
    from lab.ladder.schemes import scheme

    def parse(text: str) -> str:
        try:
            return scheme(text, among, what).name
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = what  # argparse names the type in its messages
    return parse


def _number(convert, ok, what: str, name: str):
    """An argparse type: ``convert(text)`` when ``ok`` holds for it, else one message saying
    what it must be (a value that does not convert is refused the same way)."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r} must be {what}")
        return value

    parse.__name__ = name  # argparse names the type in its messages
    return parse


_INF = float("inf")
positive_int = _number(int, lambda v: v >= 1, "an integer >= 1", "positive_int")
nonneg_int = _number(int, lambda v: v >= 0, "an integer >= 0", "nonneg_int")  # a seed, retries
positive_float = _number(float, lambda v: 0 < v < _INF, "a number > 0", "positive_float")
nonneg_float = _number(float, lambda v: 0 <= v < _INF, "a number >= 0", "nonneg_float")


def store_arg(text: str) -> str:
    """An argparse type: an experiment store's path ('' for none).  A file there that is no
    store is refused as the command line is read, before any work (an evaluation or a battery
    used to run to its end and only then fail to open it)."""
    if text:
        from lab.store.connection import check_file

        try:
            check_file(os.path.abspath(os.path.expanduser(text)))
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return text


def folder_arg(text: str) -> str:
    """An argparse type: a folder to write into, made if absent; a file there is refused as the
    command line is read (the demo wrote its report folder first, then failed on ``--runs``)."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a file: give a folder")
    return text


#: The one --device convention of every subcommand that takes one.
DEVICE_HELP = "auto (CUDA when this torch sees a GPU, else cpu), cpu, cuda or cuda:N"


def device_arg(text: str) -> str:
    """An argparse type: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``, checked without
    importing torch (`resolve_device` asks torch whether the device is there)."""
    t = text.strip().lower()
    kind, _, index = t.partition(":")
    if t in ("auto", "cpu", "cuda", "mps") or (kind == "cuda" and index.isdigit()):
        return t
    raise argparse.ArgumentTypeError(f"device {text!r} is unknown: use {DEVICE_HELP}")


def resolve_device(text: str) -> str:
    """The torch device a ``--device`` value names on this machine ("auto" → cuda or cpu);
    a ValueError naming the fix when the device is not there."""
    import torch

    t = device_arg(text)
    cuda = torch.cuda.is_available()
    if t == "auto":
        return "cuda" if cuda else "cpu"
    if t.startswith("cuda"):
        if not cuda:
            build = torch.version.cuda or "none (a CPU build)"
            raise ValueError(
                f"--device {text}: this torch {torch.__version__} sees no CUDA device (its CUDA "
                f"build: {build}); use --device cpu, or auto"
            )
        n = torch.cuda.device_count()
        if ":" in t and int(t.partition(":")[2]) >= n:
            raise ValueError(
                f"--device {text}: only {n} CUDA device(s) here (cuda:0..cuda:{n - 1})"
            )
    if t == "mps" and not (
        getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()
    ):
        raise ValueError(f"--device {text}: MPS is not available here; use --device cpu, or auto")
    return t


def add_model_preset(parser, default: str) -> None:
    """``--preset MODEL_PRESET``: a model preset (`fiblab train`'s ``--preset`` is a training
    preset, shown as TRAIN_PRESET)."""
    parser.add_argument(
        "--preset",
        metavar="MODEL_PRESET",
        default=default,
        help="model preset, e.g. paper-60m or tiny (a wrong name lists them all)",
    )
