"""Argument types shared by the subcommands."""

from __future__ import annotations

import argparse


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
    if "," in text:
        return tuple(float(x) for x in text.split(","))
    return text
