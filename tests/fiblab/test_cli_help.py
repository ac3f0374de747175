"""The `fiblab` command as a user meets it: ``--help`` and ``--version`` without torch, every
option with help text that shows its default, one ``--device`` convention, and bad input ending
in one line (exit 2, no traceback).

The parser is walked, not listed: a subcommand or option added anywhere is checked too."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

import pytest

from fiblab.cli import main
from fiblab.cli.parser import build_parser, walk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAVY = ("torch", "numpy", "pandas", "scipy", "matplotlib")


def _options(parser: argparse.ArgumentParser):
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
            continue
        if isinstance(a, argparse._SubParsersAction):
            continue
        yield a


def _python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- help without torch ------------------------------------------------------------------------
def test_every_subcommand_exists_in_the_walk():
    progs = [prog for prog, _ in walk(build_parser())]
    # a hand list of the subcommands this issue started from; others may be added
    for name in ["demo", "report", "selfcheck", "probe", "train", "eval", "efficiency", "doctor"]:
        assert f"fiblab {name}" in progs
    assert progs[0] == "fiblab" and len(progs) == len(set(progs))


def test_help_of_fiblab_and_of_every_subcommand_imports_no_torch():
    """In a fresh interpreter: ``fiblab --help`` and ``fiblab SUB --help`` for every SUB, then
    the heavy modules that were imported (none may be)."""
    code = """
import contextlib, io, sys, time
t0 = time.perf_counter()
from fiblab.cli import main
from fiblab.cli.parser import build_parser
from fiblab.cli.parser import walk
subs = [prog.split()[1:] for prog, _ in walk(build_parser())]
for argv in subs:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main([*argv, "--help"])
        except SystemExit as e:
            assert e.code == 0, (argv, e.code)
    assert "usage: fiblab" in out.getvalue(), argv
print(len(subs), time.perf_counter() - t0)
print(" ".join(sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))))
"""
    res = _python(code, *HEAVY)
    assert res.returncode == 0, res.stderr[-3000:]
    count, heavy = res.stdout.splitlines()
    assert int(count.split()[0]) >= 9
    assert heavy == "", f"--help imported {heavy}"


def test_fiblab_help_as_a_command_answers_fast_and_version_is_the_packages():
    """The timed check: the whole ``python -m fiblab.cli --help`` process (interpreter start
    included; 3-4 s when it imported torch). Generous against a loaded 2-core machine."""
    import fiblab

    env = {**os.environ, "PYTHONPATH": ROOT}
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "fiblab.cli", "--help"], cwd=ROOT, env=env, capture_output=True
    )
    wall = time.perf_counter() - t0
    assert res.returncode == 0 and b"usage: fiblab" in res.stdout
    assert wall < 2.0, f"fiblab --help took {wall:.2f} s"
    res = subprocess.run(
        [sys.executable, "-m", "fiblab.cli", "--version"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0 and res.stdout.strip() == f"fiblab {fiblab.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+", fiblab.__version__)
    with open(os.path.join(ROOT, "pyproject.toml")) as f:  # one written version: this one
        assert 'version = {attr = "fiblab.__version__"}' in f.read()


# -- help text on every option -----------------------------------------------------------------
def test_every_option_of_every_subcommand_has_help_that_shows_its_default():
    missing, no_default = [], []
    for prog, parser in walk(build_parser()):
        for a in _options(parser):
            name = a.option_strings[0] if a.option_strings else a.dest
            if not (a.help and a.help.strip()) or a.help == argparse.SUPPRESS:
                missing.append(f"{prog} {name}")
                continue
            if a.nargs == 0 or a.default is argparse.SUPPRESS:  # flags: on or off
                continue
            if a.required or (not a.option_strings and a.nargs not in ("?", "*")):
                continue  # a value the user must give has no default
            # a default of None must be explained in words; any other is printed
            helped = parser._get_formatter()._get_help_string(a) % {
                "default": a.default,
                "prog": prog,
            }
            if "default" not in helped.lower():
                no_default.append(f"{prog} {name}")
    assert missing == [], f"options without help: {missing}"
    assert no_default == [], f"options whose help does not say the default: {no_default}"


def test_a_shown_default_is_the_value_argparse_uses():
    p = build_parser()
    sub = dict(walk(p))
    help_of = {
        a.option_strings[0]: sub["fiblab probe"]._get_formatter()._get_help_string(a)
        for a in _options(sub["fiblab probe"])
        if a.option_strings
    }
    assert help_of["--depths"].endswith("(default: 2 4 8)")  # lists as typed
    assert help_of["--jobs"].endswith("(default: 1)")
    assert help_of["--steps"].endswith("(default: the scale's)")  # None: said in words
    assert "(default: " not in help_of["--precision"]  # already says "auto (default)"
    train = sub["fiblab train"].format_help()
    assert "(default: runs/fiblab.db)" in " ".join(train.split())


# -- one --device convention -------------------------------------------------------------------
def test_every_device_option_has_one_convention():
    from fiblab.cli.argtypes import device_arg

    seen = []
    for prog, parser in walk(build_parser()):
        for a in _options(parser):
            if "--device" in a.option_strings:
                seen.append(prog)
                assert a.type is device_arg and a.default == "auto", prog
    assert {"fiblab eval", "fiblab efficiency"} <= set(seen)
    p = build_parser()
    for good in ["auto", "cpu", "cuda", "cuda:1", "CPU"]:
        assert p.parse_args(["efficiency", "--device", good]).device == good.lower()


def test_resolve_device_names_the_fix_when_the_device_is_not_there(monkeypatch):
    import torch

    from fiblab.cli.argtypes import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match=r"--device cuda: .*use --device cpu, or auto"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == "cuda" and resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(ValueError, match=r"only 2 CUDA device\(s\)"):
        resolve_device("cuda:2")


# -- bad input: one line, exit 2 ---------------------------------------------------------------
BAD = [
    (["selfcheck", "--preset", "tiny", "--seq-len", "-5"], "'-5' must be an integer >= 1"),
    (["train", "--preset", "tiny", "--override", "betas=0.9", "--store", ""], "betas=0.9"),
    (["train", "--preset", "tiny", "--override", "steps=-3", "--store", ""], "steps=-3"),
    (
        ["train", "--preset", "tiny", "--steps", "8", "--override", "steps=-3"],
        "steps is given twice",
    ),
    (["train", "--preset", "tiny", "--steps", "0"], "'0' must be an integer >= 1"),
    (
        ["train", "--preset", "tiny", "--override", "model.window=4", "model.window=6"],
        "model.window is given twice: model.window=4 and model.window=6",
    ),
    (["train", "--preset", "tiny", "--name", "../up"], "run name '../up' cannot be a folder"),
    (["probe", "marked", "--scale", "tiny", "--steps", "-1"], "'-1' must be an integer >= 1"),
    (["probe", "marked", "--scale", "tiny", "--lr", "-1"], "'-1' must be a number > 0"),
    (["probe", "marked", "--scale", "tiny", "--seeds", "-2"], "'-2' must be an integer >= 0"),
    (["offsets", "--alpha", "1e308"], "alpha × rung overflowed to inf: use a smaller alpha"),
    (["offsets", "--alpha", "-1"], "'-1' must be a number > 0"),
    (["schedule", "0.5,abc"], "schedule '0.5,abc': use a name (fixed, stagger, …) or one α"),
    (["params", "--preset", "tiny", "--schedule", "1,9"], "alpha=9.0 at layer 1 must be in"),
    (["probe", "marked", "--scale", "tiny", "--depths", "0"], "'0' must be an integer >= 1"),
    (["efficiency", "--preset", "tiny", "--threads", "0"], "'0' must be an integer >= 1"),
    (
        ["efficiency", "--preset", "tiny", "--repeats", "5", "--batch", "4"],
        "--repeats and --batch apply to --measure: add --measure, or drop them",
    ),
    (["coverage", "--layers", "4", "--full"], "--full adds per-distance data to --json's"),
    (["efficiency", "--preset", "tiny", "--device", "gpu0"], "device 'gpu0' is unknown"),
    (["eval", "runs/x", "--device", "tpu"], "device 'tpu' is unknown"),
    (["nonsense"], "invalid choice: 'nonsense'"),
    # an unknown option is the command's to refuse: its line points to the command's --help
    (
        ["doctor", "--bogus"],
        "fiblab doctor: error: unrecognized arguments: --bogus (see: fiblab doctor --help)",
    ),
    (["offsets", "--alpha", "1", "extra"], "(see: fiblab offsets --help)"),
    (["--bogus", "doctor"], "fiblab: error: unrecognized arguments: --bogus (see: fiblab --help)"),
    (["probe"], "required: task"),
]


@pytest.mark.parametrize("argv,needle", BAD)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, needle):
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's errors
        rc = e.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert re.match(r"fiblab( [a-z-]+)?: error: ", lines[0]) and needle in lines[0], lines[0]


def test_an_unusable_path_is_one_line_and_exit_2(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    out = str(blocker / "sub" / "cells.jsonl")  # a folder inside a file: cannot be made
    argv = ["probe", "marked", "--scale", "tiny", "--mechanisms", "dense", "--depths", "2"]
    rc = main([*argv, "--seeds", "0", "--steps", "1", "--out", out, "--store", ""])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("fiblab: error: ")
    assert str(blocker) in lines[0] and "check the path" in lines[0]


def test_cuda_on_a_machine_without_it_is_one_line_in_a_subprocess(tmp_path):
    """The whole process: no traceback reaches the terminal."""
    code = "import sys; from fiblab.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = ["efficiency", "--preset", "tiny", "--lengths", "16", "--measure", "--device"]
    res = _python(code, *argv, "cuda", env={"CUDA_VISIBLE_DEVICES": ""})
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("fiblab: error: --device cuda: ")


def test_the_cli_lists_equal_the_labs_own():
    """fiblab.cli.choices copies what the heavy modules define (for a torch-free --help)."""
    from fiblab.cli import choices
    from lab.cost.efficiency import MODEL_SCHEMES
    from lab.evaluation.evaluate import DEFAULT_FACTORS
    from probes.settings import MECHANISMS

    assert choices.MECHANISMS == MECHANISMS
    assert choices.EFFICIENCY_SCHEMES == MODEL_SCHEMES
    assert not hasattr(choices, "RUNG_POLICIES")  # torch-free at its source: no copy
    assert choices.DEFAULT_FACTORS == DEFAULT_FACTORS


@pytest.mark.parametrize(
    "text",
    ['{\n "lr": 0.003,\n "betas": [\n  0.9,\n  0.95\n ]\n}\n', "my notes\n", '{"a": 1}\n'],
    ids=["config-json", "notes", "other-jsonl"],
)
def test_a_probe_out_that_is_not_a_results_file_is_refused_and_kept(capsys, tmp_path, text):
    """A config.json (its lines `0.9,` parse as numbers: a traceback before), a notes file
    (every line skipped: the grid's records were appended to it) or JSON lines of another
    kind: one line, exit 2, the file as it was, nothing trained."""
    out = tmp_path / "given.json"
    out.write_text(text)
    argv = ["probe", "marked", "--scale", "tiny", "--mechanisms", "dense", "--depths", "2"]
    rc = main([*argv, "--seeds", "0", "--steps", "1", "--out", str(out), "--store", ""])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "is not a probe results file" in lines[0], lines
    assert out.read_text() == text and sorted(os.listdir(tmp_path)) == ["given.json"]


def test_a_ray_address_nobody_serves_is_refused_in_seconds(capsys, tmp_path):
    """Ray retries such an address for a minute or more (and ignores SIGTERM meanwhile): the
    command says so at once.  The port is one this test holds bound but never listens on."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        argv = ["probe", "marked", "--scale", "tiny", "--mechanisms", "dense", "--depths", "2"]
        argv += ["--seeds", "0", "--out", str(tmp_path / "c.jsonl"), "--store", ""]
        t0 = time.monotonic()
        rc = main([*argv, "--ray", f"127.0.0.1:{port}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert f"nothing answers at 127.0.0.1:{port}" in lines[0] and time.monotonic() - t0 < 10
    assert not (tmp_path / "c.jsonl").exists()


def test_params_takes_one_alpha_a_layer(capsys):
    """`--schedule 1.0,1.2` on a 2-layer preset is the list its error asked for (it was refused
    as an unknown name); the count is the fixed schedule's (α is no parameter)."""
    assert main(["params", "--preset", "tiny", "--schedule", "1.0,1.2"]) == 0
    custom = capsys.readouterr().out
    assert main(["params", "--preset", "tiny", "--schedule", "fixed"]) == 0
    assert custom == capsys.readouterr().out and "parameters" in custom


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "runs/r"],
        ["battery", "r"],
        ["demo", "--scale", "smoke"],
        ["train", "--preset", "tiny"],
        ["probe", "marked", "--scale", "tiny"],
        ["report"],
    ],
    ids=lambda a: a[0],
)
def test_a_store_that_is_no_store_is_refused_before_any_work(capsys, tmp_path, monkeypatch, argv):
    """`--store notes.txt`: one line naming the file, exit 2, as the command line is read —
    an evaluation or a battery ran to its end first, the demo trained its first stage and wrote
    its report folder; nothing is written and the file is left as it was."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FIBLAB_RUNS", str(tmp_path / "runs"))
    try:
        rc = main([*argv, "--store", str(notes)])
    except SystemExit as e:
        rc = e.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert f"{notes} is not an SQLite database" in lines[0] and "left untouched" in lines[0]
    assert os.listdir(tmp_path) == ["notes.txt"] and notes.read_text() == "mine\n"


def test_resume_of_a_run_with_no_folder_is_refused(capsys, tmp_path, monkeypatch):
    """`--resume` under a mistyped name started a new run (its folder, checkpoints and store
    rows); a run whose folder exists but has no checkpoint yet still resumes from step 0."""
    monkeypatch.setenv("FIBLAB_RUNS", str(tmp_path / "runs"))
    rc = main(["train", "--preset", "tiny", "--name", "nosuch", "--resume", "--store", ""])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "run 'nosuch' has no folder" in lines[0], lines
    assert not (tmp_path / "runs").exists()
    import lab.training.train as T

    called = []
    monkeypatch.setattr(T, "train", lambda cfg, **kw: called.append(kw) or {"final_ppl": {}})
    (tmp_path / "runs" / "early").mkdir(parents=True)  # killed before its first checkpoint
    argv = ["train", "--preset", "tiny", "--name", "early", "--resume", "--store", ""]
    assert main(argv) == 0 and called[0]["resume"] is True


@pytest.mark.parametrize(
    "argv",
    [["demo", "--scale", "smoke", "--runs"], ["demo", "--scale", "smoke", "--out"],
     ["report", "--json", "--out"], ["search", "--runs"]],
    ids=["demo-runs", "demo-out", "report-out", "search-runs"],
)  # fmt: skip
def test_a_folder_option_given_a_file_is_refused_before_any_work(
    capsys, tmp_path, monkeypatch, argv
):
    """The demo made reports/demo, then failed on `--runs notes.txt` with a message naming no
    flag; a folder option given a file is refused as the command line is read."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FIBLAB_RUNS", str(tmp_path / "runs"))
    try:
        rc = main([*argv, str(notes), "--store", ""])
    except SystemExit as e:
        rc = e.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert f"argument {argv[-1]}: {str(notes)!r} is a file: give a folder" in lines[0]
    assert os.listdir(tmp_path) == ["notes.txt"] and notes.read_text() == "mine\n"
