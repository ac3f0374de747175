"""Implementation choices by measurement: time the candidates once per machine and shape class.

    which = choose("columns_attention", cls, {"cpp": run_cpp, "torch": run_torch})
    decisions()          # [Decision(op, shape_class, choice, timings_ms, errors, cost_ms, …)]

Where the lab has several implementations of the same numerics (`lab.kernels`' cpp / triton /
torch, `lab.sparse.blur`'s band / fft) the fastest depends on the machine (an AVX2 CPU without bf16
units, AMX, a GPU) and on the shapes, so ``impl="auto"`` asks `choose`.  Each candidate is a
zero-argument callable that runs that implementation once on tensors of the shape at hand
(forward, and backward when the caller needs gradients).  At the first use of a shape class on
a machine every candidate is timed briefly with `lab.machine.measure.time_fn`: one first (warm-up)
call each, then ``PASSES`` turns over the candidates of timed calls until ``BUDGET_S`` is spent,
at least one and at most ``MAX_REPS`` a turn; the fastest call counts, steadier than the median
on a busy machine, and the turns let a burst of load hit every candidate.  Candidates go in the
caller's order (the fused kernel, which may compile on its first call, before the reference);
one whose first call already takes ``CUTOFF``× the best so far is not called again (its first
call's time is what the record shows).  On CPU the callers time a slice of the batch
(`timing_rows`).  A candidate that raises is skipped and its error recorded, never chosen.  The
decision, its timings and what measuring cost (``cost_ms``, warm-ups included) are
kept in memory (a dict lookup on every later call: this sits on the model's forward path) and
on disk in ``choices.json`` under ``FIBLAB_CACHE_DIR`` (default ``~/.cache/fiblab``), keyed by
`lab.machine.hardware.Machine.key` + op + shape class, so a later process on the same machine reuses it
and another machine (CPU, threads, torch, GPU) measures its own.  The file is written
atomically; a corrupt or unreadable one is ignored with one warning.

Callers keep their static order as the fallback: the first candidate is today's choice, used
without timing when it is the only candidate, when ``FIBLAB_AUTOTUNE=0`` (the test suite's
default: results that never depend on which implementation won a race under load), and — the
caller checks `measurable` — on fake / meta tensors or while `torch.compile` traces.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import FakeTensor  # private, but the one way to ask

from lab.machine.contention import BUSY_CORES, watch
from lab.machine.hardware import machine
from lab.machine.measure import time_fn
from lab.util.files import atomic_write

CACHE_ENV = "FIBLAB_CACHE_DIR"  # the folder of choices.json (default ~/.cache/fiblab)
ENABLE_ENV = "FIBLAB_AUTOTUNE"  # "0": never measure, use each caller's static order
FILE = "choices.json"
VERSION = 1
BUDGET_S = 0.03  # timed calls per candidate while their total is under this …
MAX_REPS = 5  # … at most this many (and at least one), after one warm-up call
CUTOFF = 4.0  # a candidate whose first call is this many times the best so far is not rerun
PASSES = 2  # rounds over the candidates
_ERROR_CHARS = 300


@dataclass(frozen=True)
class Decision:
    """One measured choice: the fastest candidate for `op` on `shape_class` on one machine."""

    op: str  # "columns_attention", "blur_attention"
    shape_class: str  # see `shape_class`
    choice: str  # the implementation chosen
    candidates: tuple[str, ...]  # what was offered, in the caller's preference order
    timings_ms: dict[str, float]  # fastest timed call per candidate that ran
    errors: dict[str, str] = field(default_factory=dict)  # candidate → "Type: message"
    cost_ms: float = 0.0  # wall time the whole measurement took (warm-ups included)
    machine_key: str = ""  # `lab.machine.hardware.Machine.key` it was measured on
    measured_at: str = ""  # ISO time, UTC
    other_cores: float | None = (
        None  # other processes' CPU use meanwhile (`lab.machine.contention`)
    )
    checks: dict = field(default_factory=dict)  # a choice's own conditions (precision: quality)

    @property
    def busy(self) -> bool:
        """Measured while other processes took ≥ BUSY_CORES of the machine: the race may have
        been decided by the load (`fiblab doctor` re-measures it on a quiet machine)."""
        return self.other_cores is not None and self.other_cores >= BUSY_CORES

    def to_dict(self) -> dict:
        return {**asdict(self), "candidates": list(self.candidates)}

    @classmethod
    def from_dict(cls, d: Mapping) -> Decision:
        return cls(
            op=str(d["op"]),
            shape_class=str(d["shape_class"]),
            choice=str(d["choice"]),
            candidates=tuple(str(c) for c in d["candidates"]),
            timings_ms={str(k): float(v) for k, v in d["timings_ms"].items()},
            errors={str(k): str(v) for k, v in d.get("errors", {}).items()},
            cost_ms=float(d.get("cost_ms", 0.0)),
            machine_key=str(d.get("machine_key", "")),
            measured_at=str(d.get("measured_at", "")),
            other_cores=None if d.get("other_cores") is None else float(d["other_cores"]),
            checks=dict(d.get("checks") or {}),
        )


# this process's decisions: (torch threads, op, shape class) → Decision.  Threads are part of
# the machine key and the one part a process changes (torch.set_num_threads), so they key the
# memory too; the rest of the key is fixed for a process.
_MEMORY: dict[tuple[int, str, str], Decision] = {}
_WARNED: set[str] = set()  # cache files already warned about


# --------------------------------------------------------------------------------------------
# shape classes
# --------------------------------------------------------------------------------------------
def _pow2(n: int) -> int:
    """n rounded up to a power of two (1 for n ≤ 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def shape_class(
    device: torch.device | str,
    dtype: torch.dtype,
    *,
    grad: bool,
    bh: int,
    t: int,
    d: int,
    c: int,
    variant: str = "",
) -> str:
    """The class of problems one decision serves, e.g. ``cpu|float32|amp=-|grad|BH8|T256|D32|C32``
    (+ ``|variant``: an op's own switch of work, e.g. the attention's d/dfrac backward).

    Exact: device type, dtype, the autocast dtype (bf16 autocast changes which matmuls run and
    how fast: ≈ 20× slower on CPUs without bf16 units), whether a backward runs (the backward is
    ≈ 2/3 of a training step and the implementations' backwards differ most), and the head dim
    D (vector widths and kernel paths switch on it).  Rounded up to a power of two: B·H, T and
    the column count C.  The implementations' costs are smooth in these — linear in B·H and C,
    T·C against T² or T·log T in T — so the winner only changes over factors of several, and a
    class per octave keeps the measurements few (one per model / probe configuration) while a
    class never spans a crossover by more than a factor of two.
    """
    dev = torch.device(device).type
    amp = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None
    amp_name = str(amp).removeprefix("torch.") if amp is not None else "-"
    return (
        f"{dev}|{str(dtype).removeprefix('torch.')}|amp={amp_name}|{'grad' if grad else 'fwd'}"
        f"|BH{_pow2(bh)}|T{_pow2(t)}|D{int(d)}|C{_pow2(c)}{'|' + variant if variant else ''}"
    )


def timing_rows(batch: int, heads: int, device: torch.device | str) -> int:
    """How many batch rows the candidates are timed on: on CPU just enough that B'·H keeps
    every thread busy twice over (the work is linear in B and rows are independent, so the
    winner on a slice is the winner on the batch, at a fraction of the cost: the pure-PyTorch
    reference takes seconds a call at a training batch); on CUDA the whole batch (occupancy
    depends on it)."""
    if torch.device(device).type == "cuda":
        return batch
    return max(1, min(batch, -(-2 * torch.get_num_threads() // max(heads, 1))))


def measurable(*tensors) -> bool:
    """True when timing on these tensors means something: real CPU / CUDA data, eager mode."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    for x in tensors:
        if isinstance(x, torch.Tensor) and (
            isinstance(x, FakeTensor) or x.device.type not in ("cpu", "cuda")
        ):
            return False
    return True


def enabled() -> bool:
    """False when ``FIBLAB_AUTOTUNE=0``: callers then keep their static order."""
    return os.environ.get(ENABLE_ENV, "").strip() != "0"


# --------------------------------------------------------------------------------------------
# the disk cache
# --------------------------------------------------------------------------------------------
def cache_path() -> Path:
    """``$FIBLAB_CACHE_DIR/choices.json``, default ``~/.cache/fiblab/choices.json``."""
    folder = os.environ.get(CACHE_ENV, "").strip()
    base = Path(folder).expanduser() if folder else Path.home() / ".cache" / "fiblab"
    return base / FILE


def _disk_key(machine_key: str, op: str, cls: str) -> str:
    return f"{machine_key}|{op}|{cls}"


def _read(path: Path) -> dict[str, dict]:
    """The file's decisions by disk key; {} when it is missing, or corrupt (one warning)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as err:
        return _ignore(path, f"cannot be read ({err})")
    try:
        data = json.loads(text)
        entries = data["decisions"]
        if data.get("version") != VERSION or not isinstance(entries, dict):
            raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
        return entries
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return _ignore(path, f"is not a valid choices file ({type(err).__name__}: {err})")


def _ignore(path: Path, why: str) -> dict:
    if str(path) not in _WARNED:
        _WARNED.add(str(path))
        warnings.warn(
            f"fiblab: the implementation-choice cache {path} {why}; ignoring it (choices are "
            f"measured again and the file rewritten)",
            RuntimeWarning,
            stacklevel=4,
        )
    return {}


def _write(decision: Decision) -> None:
    """Add `decision` to the file (read, merge, write a temp file, rename: atomic)."""
    key = _disk_key(decision.machine_key, decision.op, decision.shape_class)
    _update(lambda entries: {**entries, key: decision.to_dict()})


def _update(change: Callable[[dict], dict]) -> None:
    """Rewrite the file as `change(entries)` (a temp file renamed over it: atomic)."""
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = change(_read(path))
        doc = {"version": VERSION, "decisions": entries}
        atomic_write(path, json.dumps(doc, indent=1, sort_keys=True))
    except OSError as err:  # a read-only home: the decision still holds for this process
        _ignore(path, f"cannot be written ({err})")


def _from_disk(machine_key: str, op: str, cls: str) -> Decision | None:
    entry = _read(cache_path()).get(_disk_key(machine_key, op, cls))
    if entry is None:
        return None
    try:
        return Decision.from_dict(entry)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # one bad entry: measure again (and overwrite it)


# --------------------------------------------------------------------------------------------
# the choice
# --------------------------------------------------------------------------------------------
def _fits(decision: Decision | None, names: tuple[str, ...]) -> bool:
    """A cached decision serves only the same candidate set (a new or lost one: measure)."""
    return decision is not None and decision.candidates == names


def _measure(
    op: str, cls: str, candidates: Mapping[str, Callable[[], object]], device: str, key: str
) -> Decision:
    best: dict[str, float] = {}  # seconds: the fastest call of each candidate so far
    errors: dict[str, str] = {}
    done: set[str] = set()  # candidates cut after their first call
    t0 = time.perf_counter()
    with watch() as load:
        _race(candidates, device, best, errors, done)
    timings = {name: t * 1e3 for name, t in best.items()}
    cost_ms = (time.perf_counter() - t0) * 1e3
    names = tuple(candidates)
    choice = min(timings, key=timings.__getitem__) if timings else names[0]
    return Decision(
        op=op,
        shape_class=cls,
        choice=choice,
        candidates=names,
        timings_ms=timings,
        errors=errors,
        cost_ms=cost_ms,
        machine_key=key,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        other_cores=round(load.result.other_cores, 3),
    )


def _race(candidates, device: str, best: dict, errors: dict, done: set) -> None:
    """Time the candidates in turns into `best` (seconds), `errors` and `done` (cut)."""
    for rnd in range(PASSES):  # in turns, so that a burst of load hits every candidate
        for name, run in candidates.items():
            if name in errors or name in done:
                continue
            try:
                if rnd == 0:
                    best[name] = time_fn(run, device, warmup=0, reps=1).min_s  # the warm-up
                    others = [t for n, t in best.items() if n != name]
                    if others and best[name] > CUTOFF * min(others):
                        done.add(name)  # slower even counting warm-up: not called again
                        continue
                warm = time_fn(
                    run, device, warmup=0, reps=1, max_reps=MAX_REPS, min_time_s=BUDGET_S
                )
                best[name] = min(best[name], warm.min_s)
            except Exception as err:  # a broken implementation: recorded, never chosen
                errors[name] = f"{type(err).__name__}: {err}"[:_ERROR_CHARS]
                best.pop(name, None)


def choose(op: str, shape_class: str, candidates: Mapping[str, Callable[[], object]]) -> str:
    """The implementation to use for `op` on `shape_class` (see the module docstring).

    candidates: name → zero-argument callable running that implementation once, in the
    caller's preference order (the first is the static choice: used when there is one, when
    measuring is off, and when every candidate raised).  A class starting with "cuda" (as
    `shape_class` writes it) synchronises CUDA around each timed call.  Measured once per
    machine and class; afterwards a dict lookup.
    """
    names = tuple(candidates)
    if not names:
        raise ValueError(f"choose({op!r}) got no candidates: pass at least one implementation")
    if len(names) == 1 or not enabled():
        return names[0]
    mem_key = (torch.get_num_threads(), op, shape_class)
    decision = _MEMORY.get(mem_key)
    if _fits(decision, names):
        return decision.choice
    key = machine().key
    decision = _from_disk(key, op, shape_class)
    if not _fits(decision, names):
        device = "cuda" if shape_class.startswith("cuda") else "cpu"  # what time_fn syncs
        decision = _measure(op, shape_class, candidates, device, key)
        if not decision.timings_ms:  # nothing ran: let the caller's real call raise
            return names[0]
        _write(decision)
    _MEMORY[mem_key] = decision
    return decision.choice


def lookup(op: str, shape_class: str) -> Decision | None:
    """This machine's cached decision for `op` on `shape_class` (this process's, else the
    file's), or None — never measures: for choices measured elsewhere (`fiblab doctor` times
    the precisions; a run only reads what it found)."""
    decision = _MEMORY.get((torch.get_num_threads(), op, shape_class))
    return decision or _from_disk(machine().key, op, shape_class)


def record(decision: Decision) -> None:
    """Keep a decision measured outside `choose` (in this process and in the file)."""
    _write(decision)
    _MEMORY[(torch.get_num_threads(), decision.op, decision.shape_class)] = decision


def decisions(machine_key: str | None = None) -> list[Decision]:
    """The cached decisions for this machine (or `machine_key`): the disk file's, then this
    process's (which win), sorted by op and shape class."""
    key = machine().key if machine_key is None else machine_key
    found: dict[tuple[str, str], Decision] = {}
    for entry in _read(cache_path()).values():
        try:
            d = Decision.from_dict(entry)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        if d.machine_key == key:
            found[(d.op, d.shape_class)] = d
    for d in _MEMORY.values():
        if d.machine_key == key:
            found[(d.op, d.shape_class)] = d
    return [found[k] for k in sorted(found)]


def _busy_entry(entry) -> bool:
    """A file entry measured under load, or one that no longer reads (measure it again)."""
    try:
        return Decision.from_dict(entry).busy
    except (KeyError, TypeError, ValueError, AttributeError):
        return True


def forget(machine_key: str | None = None, *, only_busy: bool = False) -> int:
    """Drop this machine's (or `machine_key`'s) decisions from memory and from the file, so
    the next use measures again (`fiblab doctor --retune`: after a choice made under load);
    ``only_busy``: just those measured while the machine was busy (`Decision.busy`).
    Returns how many the file held."""
    key = machine().key if machine_key is None else machine_key

    def drop(d: Decision) -> bool:
        return d.machine_key == key and (d.busy or not only_busy)

    for k in [k for k, d in _MEMORY.items() if drop(d)]:
        del _MEMORY[k]
    dropped = [
        k
        for k, entry in _read(cache_path()).items()
        if k.startswith(f"{key}|") and (not only_busy or _busy_entry(entry))
    ]
    if dropped:
        _update(lambda entries: {k: v for k, v in entries.items() if k not in dropped})
    return len(dropped)


def clear() -> None:
    """Forget this process's decisions (the disk file stays): the next `choose` reads the disk
    as a fresh process would."""
    _MEMORY.clear()
