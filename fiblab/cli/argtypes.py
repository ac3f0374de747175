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


def scheme_arg(among=None, what: str = "scheme"):
    """An argparse type: any spelling of a `lab.schemes` scheme (limited to ``among``), as its
    canonical name ("stagger" and "fib/stagger" give "fib-stagger")."""
    from lab.schemes import scheme

    def parse(text: str) -> str:
        try:
            return scheme(text, among, what).name
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = what  # argparse names the type in its messages
    return parse
