"""The first line of every benchmark's output: the machine it measures on.

    info = machine_header()   # prints `lab.machine.hardware.machine().line()`; returns its to_dict()

Call it after the script has set its thread count (the line names the threads measured with)
and put the returned dict under ``"machine"`` in any JSON the script writes, so a figure never
travels without its CPU model, PyTorch capability and thread count (benchmarks/RESULTS.md).
"""

from __future__ import annotations

from lab.machine.hardware import machine


def machine_header() -> dict:
    """Print this machine's one-line description (flushed: it precedes any progress output)
    and return the full record for the script's JSON."""
    m = machine()
    print(m.line(), flush=True)
    return m.to_dict()
