"""`lab.util.files`: a file is replaced whole or not at all, by any number of writers."""

from __future__ import annotations

import json
import multiprocessing as mp
import os

import pytest

from lab.util.files import atomic_path, atomic_write, exclusive_lock, is_temporary


def test_a_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "sub" / "a.json"  # the folder is made
    assert atomic_write(p, '{"x": 1}') == str(p)
    assert json.loads(p.read_text()) == {"x": 1}
    atomic_write(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    assert os.listdir(p.parent) == ["a.json"]


def test_an_error_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError, match="killed"):
        with atomic_path(p) as tmp:
            tmp.write_text("half of the new")
            assert is_temporary(tmp.name) and tmp.parent == p.parent
            raise RuntimeError("killed")
    assert p.read_text() == "old" and os.listdir(tmp_path) == ["a.txt"]
    with pytest.raises(FileNotFoundError):  # a block that wrote nothing replaces nothing
        with atomic_path(p):
            pass
    assert p.read_text() == "old"


def test_two_writers_never_share_a_temporary(tmp_path):
    p = tmp_path / "a.txt"
    with atomic_path(p) as one, atomic_path(p) as two:
        assert one != two and is_temporary(one.name) and is_temporary(two.name)
        one.write_text("one")
        two.write_text("two")
    assert p.read_text() == "one"  # the outer block ends last: its file stands
    assert not is_temporary("a.json") and not is_temporary(".hidden")


def _hammer(path: str, k: int) -> None:
    for i in range(50):
        atomic_write(path, json.dumps({"writer": k, "i": i, "pad": "x" * 4096}))


def test_concurrent_writers_and_a_reader_see_only_whole_files(tmp_path):
    p = str(tmp_path / "phase.json")
    atomic_write(p, json.dumps({"writer": -1, "i": 0, "pad": ""}))
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_hammer, args=(p, k)) for k in range(3)]
    for q in procs:
        q.start()
    seen = 0
    while any(q.is_alive() for q in procs) or not seen:
        with open(p) as f:
            doc = json.load(f)  # never a half-written file
        assert doc["writer"] in (-1, 0, 1, 2)
        seen += 1
    for q in procs:
        q.join()
        assert q.exitcode == 0
    assert [n for n in os.listdir(tmp_path)] == ["phase.json"]


def test_an_exclusive_lock_is_held_against_another_process_and_dropped_when_it_is_killed(
    tmp_path, capsys
):
    """A holder in another process keeps the lock (the oracle: a raw non-blocking flock on the
    file fails), and killing it — no clean-up run — frees the lock for the next builder at once,
    without the "waiting" line."""
    import fcntl
    import signal
    import subprocess
    import sys

    lock = tmp_path / "sub" / "entry.lock"  # its folder is made
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\nfrom lab.util.files import exclusive_lock\n"
         f"with exclusive_lock({str(lock)!r}) as held:\n"
         "    print(held, flush=True)\n    sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "True"
        with open(lock) as f, pytest.raises(BlockingIOError):
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        with exclusive_lock(lock, waiting="waiting for the holder") as held:
            assert held
        assert "waiting for the holder" not in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait(30)
