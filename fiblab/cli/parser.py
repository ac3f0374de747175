"""The `fiblab` command's parser: the class (every subcommand's help shows each option's default,
and a parse error is one line — the value, the reason, where to look — with exit code 2) and the
command tree (`build_parser`), which asks each command module to add its own subcommand.

Each command module declares its arguments beside its handler (`add_train` beside `cmd_train`,
…); subparsers made by ``sub.add_parser`` are of the parent's class, so every subcommand gets the
help format and the one-line errors without doing anything.
"""

from __future__ import annotations

import argparse
import re
import sys

from fiblab import __version__
from fiblab.cli.attention import add_attention, add_params
from fiblab.cli.battery import add_battery
from fiblab.cli.demo import add_demo
from fiblab.cli.doctor import add_doctor
from fiblab.cli.exports import add_export_store
from fiblab.cli.measure import add_efficiency, add_eval
from fiblab.cli.models import add_models
from fiblab.cli.probe import add_probe
from fiblab.cli.report import add_report
from fiblab.cli.search import add_search
from fiblab.cli.sweep import add_sweep
from fiblab.cli.train import add_train

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

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an unknown option is refused by the command it was given to, so
        the line points to `fiblab doctor --help`, not to `fiblab --help` (argparse reports it
        from the top parser, which does not know the command's options)."""
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            argv = list(sys.argv[1:] if args is None else args)
            cmd = getattr(ns, "cmd", None)
            before = argv[: argv.index(cmd)] if cmd in argv else []
            by_prog = {sp.prog: sp for _, sp in walk(self)}
            ours = self if any(e in before for e in extra) else None  # `fiblab --bogus doctor`
            (ours or by_prog.get(getattr(ns, "_prog", None), self)).error(
                f"unrecognized arguments: {' '.join(extra)}"
            )
        return ns


def walk(parser: argparse.ArgumentParser, prog: str | None = None):
    """(prog, parser) for ``parser`` and every subparser below it, depth first."""
    yield prog or parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sp in action.choices.items():
                yield from walk(sp, f"{prog or parser.prog} {name}")


#: What `fiblab --help` shows above the command list: every command in one line.
COMMANDS = """`fiblab` command line.

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


def build_parser() -> FibParser:
    """The whole command line; importing and building it imports no torch (``fiblab --help``)."""
    p = FibParser(prog="fiblab", description=COMMANDS)
    p.add_argument(
        "--version", action="version", version=f"fiblab {__version__}", help="print the version"
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    add_demo(sub)
    add_report(sub)
    add_attention(sub)
    add_probe(sub)
    add_train(sub)
    add_eval(sub)
    add_battery(sub)
    add_efficiency(sub)
    add_export_store(sub)
    add_models(sub)
    add_search(sub)
    add_sweep(sub)
    add_doctor(sub)
    add_params(sub)
    for _, sp in walk(p):  # the deepest command parsed sets it last: who refuses extra options
        sp.set_defaults(_prog=sp.prog)
    return p
