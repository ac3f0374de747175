"""The store's connection helpers against a stand-in ``git`` on PATH: which answers count as a
commit hash, a git that hangs or reads stdin, the revision a run records, UnknownRunError's text."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import lab.store.connection as sc
from lab.store import Store
from lab.store.connection import UnknownRunError, git_revision

ROOT = Path(__file__).resolve().parents[2]
SHA1 = "0123456789abcdef" * 2 + "01234567"  # 40 hex digits, as `git rev-parse` prints
SHA256 = "fedcba9876543210" * 4  # 64: a repository in SHA-256 object format


@pytest.fixture
def fake_git(tmp_path, monkeypatch):
    """``fake_git(body)`` puts a ``git`` running the shell ``body`` first on PATH."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()

    def install(body: str) -> None:
        git = bin_dir / "git"
        git.write_text("#!/bin/sh\n" + body + "\n")
        git.chmod(0o755)

    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return install


def answers(out: str, rc: int = 0) -> str:
    return f"printf '%s\\n' {shlex.quote(out)}\nexit {rc}"


@pytest.mark.parametrize(
    "out, rc, want",
    [
        (SHA1, 0, SHA1),
        (SHA256, 0, SHA256),
        (SHA1, 1, None),  # git failed, whatever it printed
        (SHA256, 128, None),
        ("abc123", 0, None),  # hex, but no full hash
        (SHA1[:39], 0, None),
        (SHA1 + "0", 0, None),  # 41 digits
        ("X" * 40, 0, None),  # the right length, not hex
        ("g" * 40, 0, None),
        (SHA1.upper(), 0, None),  # rev-parse prints lower case only
        ("", 0, None),
    ],
)
def test_only_a_full_lower_case_hash_from_a_git_that_succeeds_counts(fake_git, out, rc, want):
    fake_git(answers(out, rc))
    assert git_revision(ROOT) == want


def test_a_git_that_hangs_gives_none_after_the_timeout(fake_git, monkeypatch):
    fake_git(f"sleep 5\n{answers(SHA1)}")
    monkeypatch.setattr(sc, "GIT_TIMEOUT_S", 0.5)
    t0 = time.monotonic()
    assert git_revision(ROOT) is None
    assert time.monotonic() - t0 < 4  # it did not wait for the 5 s git


@contextmanager
def stdin_holding(text: str):
    """File descriptor 0 reads ``text`` (then EOF) inside the block."""
    r, w = os.pipe()
    os.write(w, text.encode())
    os.close(w)
    saved = os.dup(0)
    try:
        os.dup2(r, 0)
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(r)


def test_git_never_reads_the_callers_stdin(fake_git):
    fake_git("exec cat")  # a git that answers with whatever its stdin holds
    with stdin_holding(SHA1 + "\n"):  # the premise: a child that inherits stdin reads it
        inherited = subprocess.run(["git"], capture_output=True, text=True, timeout=10)
    assert inherited.stdout.strip() == SHA1
    with stdin_holding(SHA1 + "\n"):
        assert git_revision(ROOT) is None


def probe_record() -> dict:
    """The least `Store.log_probe` takes; it carries no git_rev of its own."""
    return {
        "task": "marked",
        "mechanism": "learned",
        "depth": 2,
        "init": "staggered",
        "seed": 0,
        "steps": 10,
        "acc": {"5": 0.9},
    }


def test_runs_record_the_checkouts_revision_and_git_is_asked_once(fake_git, tmp_path):
    calls = tmp_path / "calls"
    fake_git(f"echo asked >> {shlex.quote(str(calls))}\n{answers(SHA1)}")
    with Store(tmp_path / "s.db") as s:
        s.start_run("a", {})
        s.start_run("b", {}, git_rev="given")
        s.start_run("c", {})
        probe = s.log_probe(probe_record())
        runs = s.runs()
    assert dict(zip(runs["name"], runs["git_rev"])) == {
        "a": SHA1,
        "b": "given",
        "c": SHA1,
        probe: SHA1,
    }
    assert calls.read_text().splitlines() == ["asked"]


def test_outside_git_runs_record_no_revision_and_git_is_asked_once(fake_git, tmp_path):
    calls = tmp_path / "calls"
    fake_git(f"echo asked >> {shlex.quote(str(calls))}\n{answers('fatal: not a git repo', 128)}")
    with Store(tmp_path / "s.db") as s:
        s.start_run("a", {})
        s.start_run("b", {})
        runs = s.runs()
    assert runs["git_rev"].isna().all() and len(runs) == 2
    assert calls.read_text().splitlines() == ["asked"]  # the None is remembered too


def test_unknown_run_error_prints_its_message_not_a_repr():
    msg = "no run named 'x' in s.db"
    assert str(KeyError(msg)) == repr(msg)  # what a plain KeyError would print
    assert str(UnknownRunError(msg)) == msg
    assert str(UnknownRunError()) == ""
