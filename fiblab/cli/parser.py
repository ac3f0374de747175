"""The `fiblab` command's parser: the class (every subcommand's help shows each option's default,
and a parse error is one line — the value, the reason, where to look — with exit code 2) and the
command tree (`build_parser`): each subcommand's options and the handler it calls.

Subparsers made by ``sub.add_parser`` are of the parent's class, so a subcommand added in any
module (`add_eval`, …) gets both without doing anything.  The small commands are declared here;
the others add themselves (`add_search`, `add_sweep`, …) from their own modules.
"""

from __future__ import annotations

import argparse
import re

from fiblab import __version__
from fiblab.cli.argtypes import (
    add_model_preset,
    base_arg,
    positive_float,
    positive_int,
    schedule_arg,
    scheme_arg,
)
from fiblab.cli.attention import (
    cmd_coverage,
    cmd_offsets,
    cmd_params,
    cmd_receptive_field,
    cmd_schedule,
    cmd_selfcheck,
)
from fiblab.cli.battery import add_battery
from fiblab.cli.choices import MECHANISMS
from fiblab.cli.demo import cmd_demo
from fiblab.cli.doctor import cmd_doctor
from fiblab.cli.exports import add_export_store, add_log_options
from fiblab.cli.measure import add_efficiency, add_eval
from fiblab.cli.models import add_models
from fiblab.cli.probe import cmd_probe
from fiblab.cli.report import cmd_report
from fiblab.cli.search import add_search
from fiblab.cli.sweep import add_ray_options, add_sweep
from fiblab.cli.train import cmd_train
from lab.util import paths

# FIBLAB_STORE / FIBLAB_RUNS, else runs/fiblab.db and runs/ in the working directory

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

STORE_HELP = "experiment store ('' to skip; FIBLAB_STORE sets it)"
RUNS_HELP = "folder for run directories and probe results (FIBLAB_RUNS sets it)"


def build_parser() -> FibParser:
    """The whole command line; importing and building it imports no torch (``fiblab --help``)."""
    p = FibParser(prog="fiblab", description=COMMANDS)
    p.add_argument(
        "--version", action="version", version=f"fiblab {__version__}", help="print the version"
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("demo", help="the main job: a lab-scale reproduction ending in a report")
    s.add_argument(
        "--scale",
        choices=["full", "smoke", "study", "study-smoke"],
        default="full",
        help="full (≈6–10 min on 2 cores), smoke (seconds), study (the CPU study of the LM "
        "claims, ≤ 3 h, resumable) or study-smoke (the study's stages in a minute)",
    )
    s.add_argument(
        "--out", default=None, help="report folder (default reports/demo; reports/study for study)"
    )
    s.add_argument("--runs", default=paths.runs_dir(), help=RUNS_HELP)
    s.add_argument("--store", default=paths.store_path(), help=STORE_HELP)
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("report", help="Markdown + HTML report of runs in the store")
    s.add_argument("runs", nargs="*", help="LM run names (default: every finished run)")
    s.add_argument(
        "--store", default=paths.store_path(), help="experiment store (FIBLAB_STORE sets it)"
    )
    s.add_argument(
        "--probes",
        nargs="*",
        default=None,
        help="probe result JSONL files (default: the probe cells in the store)",
    )
    s.add_argument("--dataset", default=None, help="held-out domain (default: the only one)")
    s.add_argument("--title", default="fiblab report", help="the report's title")
    s.add_argument(
        "--paper-db",
        default=None,
        help="also rebuild the paper's tables from the authors' fib.db (default: not)",
    )
    s.add_argument(
        "--out",
        default=None,
        help="report folder, e.g. reports/NAME (default: none, allowed with --json)",
    )
    s.add_argument(
        "--json",
        action="store_true",
        help="print every table as JSON on stdout: one object, table name → list of rows "
        "(the claims ledger under 'claims')",
    )
    s.add_argument(
        "--no-grids",
        action="store_true",
        help="leave the lab's stored results — the paper-scale probe grids "
        "(benchmarks/results) and the attention timings (benchmarks/attention-*.json) — out of "
        "the claims ledger (default: use them when the checkout has them)",
    )
    s.set_defaults(fn=cmd_report)

    s = sub.add_parser("selfcheck", help="build a model, forward/backward through every path")
    add_model_preset(s, "paper-60m")
    s.add_argument(
        "--seq-len", type=positive_int, default=None, help="input length (default: preset's)"
    )
    s.set_defaults(fn=cmd_selfcheck)

    def set_args(sp):
        sp.add_argument("--window", "-W", type=int, default=8, help="local window W")
        sp.add_argument("--seq-len", "-T", type=int, default=1024, help="sequence length T")
        sp.add_argument(
            "--base", type=base_arg, default="fib", help="fib, pow2 or a comma list like 1,3,9"
        )
        sp.add_argument("--rungs", "-K", type=int, default=15, help="rungs K of the base")
        sp.add_argument(
            "--rounding",
            choices=["round", "floor", "ceil"],
            default="round",
            help="how α·f becomes an integer distance (round: half to even)",
        )

    s = sub.add_parser("offsets", help="the attended distances of one layer")
    s.add_argument("--alpha", type=float, default=1.0, help="the layer's scale α")
    s.add_argument(
        "--reach", type=int, default=None, help="freeze rungs at this length (default: never)"
    )
    s.add_argument("--interp", action="store_true", help="show interpolated columns instead")
    set_args(s)
    s.set_defaults(fn=cmd_offsets)

    s = sub.add_parser("schedule", help="per-layer alpha and attended sets of a schedule")
    s.add_argument("schedule", type=schedule_arg, help="fixed|stagger|coprime|a,comma,list")
    s.add_argument("--layers", "-L", type=int, default=16, help="layers L")
    s.add_argument(
        "--stride", type=int, default=None, help="coprime stride S (default: the schedule's)"
    )
    s.add_argument("--sets", action="store_true", help="print each layer's rungs")
    set_args(s)
    s.set_defaults(fn=cmd_schedule)

    s = sub.add_parser("coverage", help="distinct-distance and band coverage of a schedule")
    s.add_argument("--schedule", default="stagger", help="fixed|stagger|coprime")
    s.add_argument(
        "--alphas",
        type=schedule_arg,
        default=None,
        help="custom a,b,c per layer (default: the schedule's)",
    )
    s.add_argument("--layers", "-L", type=int, default=16, help="layers L")
    s.add_argument(
        "--stride", type=int, default=None, help="coprime stride S (default: the schedule's)"
    )
    s.add_argument("--band", type=int, default=None, help="soft band half-width (default W)")
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.add_argument("--full", action="store_true", help="with --json: include per-distance data")
    set_args(s)
    s.set_defaults(fn=cmd_coverage)

    s = sub.add_parser("receptive-field", help="reachable distances through the stack")
    s.add_argument(
        "--schedule", default="stagger", help="fixed|stagger|coprime|pow2|pow2-stagger|dense"
    )
    s.add_argument(
        "--schemes", nargs="+", default=None, help="compare several schemes (default: --schedule)"
    )
    s.add_argument(
        "--alphas",
        type=schedule_arg,
        default=None,
        help="custom a,b,c per layer (default: the scheme's)",
    )
    s.add_argument("--layers", "-L", type=int, default=16, help="layers L")
    s.add_argument("--residual", type=float, default=0.0, help="weight kept on staying put")
    s.add_argument("--json", action="store_true", help="one JSON object")
    set_args(s)
    s.set_defaults(fn=cmd_receptive_field)

    s = sub.add_parser("probe", help="retrieval probes (the paper's Table 2 grid)")
    s.add_argument(
        "task",
        choices=["marked", "shift", "kv"],
        help="marked two-distance copy (Table 2), shift copy, or key-value retrieval",
    )
    s.add_argument(
        "--distances",
        type=int,
        nargs="+",
        default=None,
        help="shift: trained distances, one cell each (default: none; shift needs them)",
    )
    s.add_argument(
        "--mechanisms",
        nargs="+",
        default=["blur"],
        type=scheme_arg(MECHANISMS, "mechanism"),
        help=" ".join(MECHANISMS) + " (or another spelling: stagger, fib/stagger, …)",
    )
    s.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8], help="layers per model")
    s.add_argument(
        "--init",
        nargs="+",
        default=["uniform", "staggered"],
        help="learned α's initialisation: uniform and/or staggered",
    )
    s.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds, one cell each")
    s.add_argument(
        "--scale",
        choices=["paper", "quick", "demo", "tiny"],
        default="paper",
        help="named settings (steps, batch, model size)",
    )
    s.add_argument(
        "--steps", type=positive_int, default=None, help="training steps (default: the scale's)"
    )
    s.add_argument(
        "--batch", type=positive_int, default=None, help="batch size (default: the scale's)"
    )
    s.add_argument(
        "--lr", type=positive_float, default=None, help="learning rate (default: the scale's)"
    )
    s.add_argument(
        "--log-every",
        type=positive_int,
        default=None,
        help="log α and loss every N steps (default: the scale's)",
    )
    s.add_argument(
        "--marker-distances",
        type=int,
        nargs="+",
        default=None,
        metavar="D",
        help="marked: the marker distances, one marker each (default: the scale's, e.g. 200 "
        "350 at paper scale)",
    )
    s.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default=None,
        help="auto (default): bf16 on CUDA, fp32 on a CPU (probe cells are keyed by precision; "
        "results then match across CPUs); bf16: forward under bfloat16 autocast, as the "
        "paper's GPU probes (faster on CPUs with bf16 units, ≈ 20× slower without)",
    )
    s.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="cells run at once, in worker processes of cores/jobs threads each",
    )
    s.add_argument(
        "--out",
        default=None,
        help="results JSONL (resumable); default <runs>/probes/TASK-SCALE.jsonl, <runs> being "
        "FIBLAB_RUNS or runs/",
    )
    s.add_argument("--json", action="store_true", help="one JSON record per cell on stdout")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument(
        "--store",
        default=paths.store_path(),
        help="experiment store to log each record into as its cell finishes ('' to skip; "
        "FIBLAB_STORE sets it)",
    )
    s.add_argument(
        "--live",
        default=None,
        metavar="DIR",
        help="folder for live progress (progress.json, live/*.json per running cell) and the "
        "stop request: touch DIR/STOP and the running cells are abandoned, finished ones kept "
        "(default: none; fiblab.jobs.probe_launch sets it)",
    )
    add_log_options(s)
    add_ray_options(s)
    s.set_defaults(fn=cmd_probe)

    s = sub.add_parser("train", help="train a language model (paper recipe or a CPU preset)")
    s.add_argument(
        "--preset",
        metavar="TRAIN_PRESET",
        default=None,
        help="training preset, e.g. fib-stagger-w12, dense, cpu-stagger (default: none; give "
        "--preset or --config)",
    )
    s.add_argument(
        "--config",
        default=None,
        metavar="CONFIG_JSON",
        help="instead of --preset: a run's config.json (runs/NAME/config.json) to re-run or "
        "vary (default: none)",
    )
    s.add_argument(
        "--data",
        default=None,
        help="bible (default), a file/folder/.jsonl(.gz)/.parquet/"
        ".bin, a folder or quoted glob of shards, a save_to_disk folder, or a mixture "
        "name=source@weight,...",
    )
    s.add_argument(
        "--tokenizer",
        default=None,
        metavar="TOKENIZER_JSON",
        help="a Hugging Face tokenizer.json (e.g. a Llama tokenizer) to tokenise the text with "
        "and to read .bin ids against; the model's vocab_size becomes its size (default: a "
        "BPE trained on the text at the model's vocab_size)",
    )
    s.add_argument(
        "--steps", type=positive_int, default=None, help="optimizer steps (default: the preset's)"
    )
    s.add_argument("--seed", type=int, default=None, help="seed (default: the preset's)")
    s.add_argument("--name", default=None, help="run name (default: the preset)")
    s.add_argument(
        "--override",
        nargs="*",
        action="extend",
        metavar="KEY=VALUE",
        help="any TrainConfig field, or model.<ModelConfig field> (betas=0.9,0.95, "
        "model.schedule=stagger or a comma list of alphas, model.train_seq_len=none); "
        "run_dir defaults to FIBLAB_RUNS or runs/",
    )
    s.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default=None,
        help="auto (default): bf16 autocast on CUDA; on a CPU bf16 only where `fiblab doctor` "
        "measured it faster for this workload with the loss unchanged, else fp32",
    )
    s.add_argument("--resume", action="store_true", help="continue from the last good checkpoint")
    s.add_argument(
        "--restart",
        action="store_true",
        help="when every checkpoint of the run is corrupt: set them aside (*.corrupt) and train "
        "it again from step 0 (without it such a run is refused)",
    )
    s.add_argument("--store", default=paths.store_path(), help=STORE_HELP)
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    add_log_options(s)
    add_ray_options(s)  # the run as one Ray task (fiblab.cluster.ray_run.train_on_ray)
    s.set_defaults(fn=cmd_train)

    add_eval(sub)
    add_battery(sub)
    add_efficiency(sub)
    add_export_store(sub)
    add_models(sub)
    add_search(sub)
    add_sweep(sub)

    s = sub.add_parser("doctor", help="this machine, the lab's choices on it, expected times")
    s.add_argument("--json", action="store_true", help="the report as one JSON object")
    s.add_argument("--reps", type=int, default=3, help="timed steps of each measurement")
    s.add_argument(
        "--retune", action="store_true", help="forget the cached implementation choices first"
    )
    s.set_defaults(fn=cmd_doctor)

    s = sub.add_parser("params", help="parameter count of a preset")
    add_model_preset(s, "paper-60m")
    s.add_argument(
        "--schedule", default=None, help="α schedule, e.g. learned (default: the preset's)"
    )
    s.set_defaults(fn=cmd_params)
    return p
