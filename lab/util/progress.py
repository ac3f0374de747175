"""Progress bars for the lab's long loops: tqdm on stderr, one construction for all of them.

A disabled bar (``enabled=False``: a quiet flag, a worker process, a test) is tqdm's own no-op
bar, so callers update it unconditionally and nothing is printed. Notebooks do not read these
bars: they follow `on_step` callbacks (`probes.runner.run_cell`) and the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def bar(enabled: bool = True, **kwargs):
    """A tqdm bar (``kwargs`` as tqdm's: desc, total, unit, …), resized with the terminal."""
    from tqdm import tqdm

    return tqdm(disable=not enabled, dynamic_ncols=True, **kwargs)


def bytes_bar(desc: str, total: int | None = None, enabled: bool = True):
    """A bar counting bytes, shown as kB / MB and MB/s."""
    return bar(enabled, desc=desc, total=total, unit="B", unit_scale=True, unit_divisor=1000)


def reading(texts: Iterable[str], desc: str, enabled: bool = True) -> Iterator[str]:
    """`texts` unchanged, with a bar of the characters read so far (e.g. a BPE trainer's input,
    which it reads before it merges)."""
    with bar(enabled, desc=desc, unit="char", unit_scale=True, leave=False) as b:
        for t in texts:
            b.update(len(t))
            yield t
