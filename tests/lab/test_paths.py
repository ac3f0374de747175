"""Where runs and the store go (`lab.util.paths`): FIBLAB_STORE / FIBLAB_RUNS first; else runs/ in
the working directory for the command line, and in the checkout for the notebooks and the
launcher, and never inside an installed package's folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fiblab.cli.parser import build_parser, walk
from lab.util import paths

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("FIBLAB_STORE", raising=False)
    monkeypatch.delenv("FIBLAB_RUNS", raising=False)
    return monkeypatch


def test_defaults_without_the_variables(no_env, tmp_path):
    assert paths.runs_dir() == "runs" and paths.store_path() == os.path.join("runs", "fiblab.db")
    assert paths.runs_dir(tmp_path) == str(tmp_path / "runs")
    assert paths.store_path(tmp_path) == str(tmp_path / "runs" / "fiblab.db")


def test_the_variables_win_and_runs_alone_moves_the_store(no_env, tmp_path):
    no_env.setenv("FIBLAB_RUNS", str(tmp_path / "r"))
    assert paths.runs_dir() == paths.runs_dir("/elsewhere") == str(tmp_path / "r")
    assert paths.store_path("/elsewhere") == str(tmp_path / "r" / "fiblab.db")
    no_env.setenv("FIBLAB_STORE", str(tmp_path / "s.db"))
    assert paths.store_path() == paths.store_path("/elsewhere") == str(tmp_path / "s.db")
    no_env.setenv("FIBLAB_STORE", "  ")  # blank is unset
    assert paths.store_path() == str(tmp_path / "r" / "fiblab.db")


def test_checkout_root_is_this_checkout_and_none_for_an_installed_package(tmp_path):
    assert paths.checkout_root() == ROOT
    site = tmp_path / "site-packages"  # what a wheel install looks like: no pyproject.toml
    (site / "lab").mkdir(parents=True)
    assert paths.checkout_root(site) is None
    (site / "pyproject.toml").write_text('[project]\nname = "other"\n')  # someone else's
    assert paths.checkout_root(site) is None
    (site / "pyproject.toml").write_text('[project]\nname = "fiblab"\n')
    assert paths.checkout_root(site) == site


def test_work_dir_is_the_working_directory_outside_a_checkout(monkeypatch, tmp_path):
    assert paths.work_dir() == ROOT  # from this checkout, wherever the process runs
    monkeypatch.setattr(paths, "_HERE", tmp_path / "site-packages")
    monkeypatch.chdir(tmp_path)
    assert paths.work_dir() == tmp_path


def test_every_store_and_runs_default_of_the_cli_follows_the_variables(no_env, tmp_path):
    def defaults():
        out = {}
        for prog, parser in walk(build_parser()):
            for a in parser._actions:
                if a.dest in ("store", "runs") and a.option_strings:
                    out[f"{prog} {a.option_strings[0]}"] = a.default
        return out

    plain = defaults()
    assert {"fiblab train --store", "fiblab demo --runs", "fiblab eval --store"} <= set(plain)
    assert set(plain.values()) == {"runs", os.path.join("runs", "fiblab.db")}
    no_env.setenv("FIBLAB_RUNS", str(tmp_path / "r"))
    no_env.setenv("FIBLAB_STORE", str(tmp_path / "s.db"))
    moved = defaults()
    for key, value in plain.items():
        want = str(tmp_path / "r") if value == "runs" else str(tmp_path / "s.db")
        assert moved[key] == want, key


def test_the_notebooks_and_the_launcher_keep_runs_in_the_checkout(no_env):
    from fiblab.jobs import launch
    from fiblab.ui import common

    assert common.store_path() == str(ROOT / "runs" / "fiblab.db")
    assert common.runs_dir() == str(ROOT / "runs")
    assert launch.DEFAULT_STORE == str(ROOT / "runs" / "fiblab.db")
    assert launch.DEFAULT_RUNS == str(ROOT / "runs")
    no_env.setenv("FIBLAB_STORE", "/x/s.db")
    no_env.setenv("FIBLAB_RUNS", "/x/r")
    assert (common.store_path(), common.runs_dir()) == ("/x/s.db", "/x/r")


def test_train_and_probe_write_under_fiblab_runs(no_env, tmp_path, capsys):
    from fiblab.cli import main

    no_env.setenv("FIBLAB_RUNS", str(tmp_path / "r"))
    no_env.chdir(tmp_path)
    argv = ["probe", "marked", "--scale", "tiny", "--mechanisms", "dense", "--depths", "2"]
    assert main([*argv, "--seeds", "0", "--steps", "2", "--no-progress"]) == 0
    assert (tmp_path / "r" / "probes" / "marked-tiny.jsonl").is_file()
    assert (tmp_path / "r" / "fiblab.db").is_file()  # the store follows FIBLAB_RUNS
    assert not (tmp_path / "runs").exists()
    # train: the run folder goes under FIBLAB_RUNS (an explicit run_dir override still wins)
    from fiblab.cli.train import cmd_train

    seen = {}

    def fake_train(cfg, **kw):
        seen["run_dir"] = cfg.run_dir
        return {"name": cfg.name, "final_ppl": {}, "run_dir": cfg.run_dir}

    no_env.setattr("lab.training.train.train", fake_train)
    args = build_parser().parse_args(["train", "--preset", "tiny", "--store", ""])
    assert cmd_train(args) == 0 and seen["run_dir"] == str(tmp_path / "r")
    args = build_parser().parse_args(
        ["train", "--preset", "tiny", "--store", "", "--override", "run_dir=elsewhere"]
    )
    assert cmd_train(args) == 0 and seen["run_dir"] == "elsewhere"
