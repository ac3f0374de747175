"""The `fiblab` command's argument parser class: every subcommand's help shows each option's
default, and a parse error is one line (the value, the reason, where to look) with exit code 2.

Subparsers made by ``sub.add_parser`` are of the parent's class, so a subcommand added in any
module (`add_eval`, …) gets both without doing anything.
"""

from __future__ import annotations

import argparse
import re

_SAYS_DEFAULT = re.compile(r"\(default|default:|%\(default\)", re.IGNORECASE)


def shown(value) -> str:
    """A default as a user would type it: lists space-separated, '' quoted."""
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return "''" if value == "" else str(value)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; an option's help ends in ``(default: …)`` unless the help
    already says what the default is, or there is none to show (None, a flag that is off)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (
            _SAYS_DEFAULT.search(text)
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or (not action.option_strings and action.nargs not in ("?", "*"))
        ):
            return text
        return f"{text} (default: {shown(default).replace('%', '%%')})"


class FibParser(argparse.ArgumentParser):
    """An ArgumentParser with `HelpFormatter` and one-line errors."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def walk(parser: argparse.ArgumentParser, prog: str | None = None):
    """(prog, parser) for ``parser`` and every subparser below it, depth first."""
    yield prog or parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sp in action.choices.items():
                yield from walk(sp, f"{prog or parser.prog} {name}")
