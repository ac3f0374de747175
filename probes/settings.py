"""What a retrieval probe is: its mechanisms, its settings, the named scales, and the cell.

A *cell* is (task, mechanism, depth, init, seed, and for ``shift`` the trained distance);
`Cell.key(settings)` names its record.  `SCALES` are the marked task's settings by scale name
(``paper``, ``quick``, ``demo``, ``tiny``); `TASK_SCALES` holds them per task family.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from lab.ladder.schemes import scheme
from lab.machine.precision import resolve_precision
from probes.tasks import KVRetrieval, MarkedCopy, ShiftCopy

#: The probe mechanisms: `lab.ladder.schemes` names (any spelling of them is accepted on input).
MECHANISMS: tuple[str, ...] = ("dense", "fib-fixed", "pow2", "fib-stagger", "learned", "blur")
LEARNED = frozenset(m for m in MECHANISMS if scheme(m).learned)
INITS = ("uniform", "staggered")


def mechanism(name: str):
    """The `lab.ladder.schemes.Scheme` of a probe mechanism (ValueError listing the valid ones)."""
    return scheme(name, among=MECHANISMS, what="mechanism")


@dataclass
class ProbeSettings:
    steps: int = 2500
    lr: float = 1e-3
    batch: int = 2
    eval_batch: int = 8
    log_every: int = 50
    window: int = 8
    rungs: int = 15
    d_model: int = 256
    blur_w0: float = 40.0
    task: MarkedCopy | ShiftCopy | KVRetrieval = field(default_factory=MarkedCopy)
    controls: tuple = (128, 233, 350, 377, 512, 700)  # shift: extra evaluation distances
    sampler: str = "coverage"  # kv: training-distance sampler
    eval_batches: int = 1  # kv: evaluation batches per distance
    precision: str = "auto"  # "bf16": forward and loss under bfloat16 autocast (the paper's
    #   probes ran so on GPU); fp32 weights and optimizer either way; "auto": bf16 on CUDA,
    #   fp32 on a CPU (no workload class: lab.machine.precision) — resolved before any key

    def resolved(self, device="cpu") -> ProbeSettings:
        """These settings with `precision` resolved for `device` (what the cell computes in and
        is keyed by); a forced bf16 on a CPU without native bf16 warns once."""
        return replace(self, precision=resolve_precision(self.precision, device))


SCALES = {
    "paper": ProbeSettings(),
    "quick": ProbeSettings(steps=400, log_every=20),
    # the main job's (`fiblab demo`) reduced Table 2: T=256, distances 125 and 219, near the
    # staggered init's rungs 0.55·233 = 128 and 1.45·144 = 209 (as the paper's 200 and 350 are
    # near 0.55·377 = 207 and 1.45·233 = 338), at least 14 from every α=1 rung (89, 144, 233),
    # and in a ratio (1.75, the paper's too) that no single α can serve with two Fibonacci rungs.
    # (80 and 210 = 0.9·89 and 0.9·233 were tried first: a uniform init solved both by moving
    # every α to 0.9.)  lr 3e-3 so that 600 steps suffice at depth 4.
    "demo": ProbeSettings(
        steps=600,
        lr=3e-3,
        batch=4,
        eval_batch=16,
        log_every=20,
        d_model=128,
        blur_w0=20.0,
        task=MarkedCopy(seq_len=256, vocab=256, n_payload=128, distances=(125, 219)),
    ),
    # seconds, for tests and smoke runs: T=48, distances (5, 13), 16 payload ids, d=64
    "tiny": ProbeSettings(
        steps=150,
        log_every=25,
        batch=8,
        lr=3e-3,
        eval_batch=16,
        d_model=64,
        window=2,
        rungs=6,
        blur_w0=4.0,
        task=MarkedCopy(seq_len=48, vocab=32, n_payload=16, distances=(5, 13)),
    ),
}

# the other two probe families (SPEC §6.1–6.2), same scale names
TASK_SCALES = {
    "marked": SCALES,
    # single-distance shift copy: T=1024, ids [0, 256), vocab 512, batch 8, 3000 steps, lr 1e-3
    "shift": {
        "paper": ProbeSettings(steps=3000, batch=8, task=ShiftCopy()),
        "quick": ProbeSettings(steps=400, batch=8, log_every=20, task=ShiftCopy()),
        "tiny": ProbeSettings(
            steps=120,
            log_every=20,
            batch=8,
            lr=3e-3,
            eval_batch=8,
            d_model=64,
            window=2,
            rungs=6,
            blur_w0=4.0,
            controls=(3, 8),
            task=ShiftCopy(seq_len=48, vocab=32, n_tokens=16),
        ),
    },
    # key-value retrieval with 4 distractors at T=1024: batch 32, 4000 steps, lr 3e-4,
    # loss at the last position only, forced choice among the 5 values present (chance 0.2)
    "kv": {
        "paper": ProbeSettings(
            steps=4000, batch=32, lr=3e-4, eval_batch=32, eval_batches=4, task=KVRetrieval()
        ),
        "quick": ProbeSettings(
            steps=400, batch=32, lr=3e-4, eval_batch=32, log_every=20, task=KVRetrieval()
        ),
        "tiny": ProbeSettings(
            steps=30,
            log_every=10,
            batch=4,
            lr=3e-3,
            eval_batch=4,
            d_model=32,
            window=2,
            rungs=6,
            blur_w0=4.0,
            sampler="coverage",
            task=KVRetrieval(
                seq_len=1024, vocab=512, filler=(0, 256), keys=(256, 384), values=(384, 512)
            ),
        ),
    },
}


#: How to read a cell's record name (`Cell.key`), for every place that shows one.
KEY_LEGEND = (
    "task / mechanism / d<layers> / α init (- when α is not learned) / s<seed> / n<steps> / "
    "b<batch> / lr<learning rate> / w<window W> [/ bf16]; e.g. "
    "marked/blur/d2/staggered/s0/n150/b8/lr0.003/w2 is the marked copy task through the blur "
    "gather, 2 layers, staggered init, seed 0, 150 steps, batch 8, lr 0.003, window 2"
)


@dataclass(frozen=True)
class Cell:
    mechanism: str
    depth: int
    init: str
    seed: int
    task: str = "marked"
    distance: int | None = None  # shift: the trained distance

    def key(self, settings: ProbeSettings) -> str:
        """The record's name: the cell and the settings that change its result, with the
        precision it computes in ("auto" resolved for the CPU the probes run on)."""
        precision = resolve_precision(settings.precision, "cpu")
        task = self.task
        if self.task == "shift":
            task = f"shift@{self.distance}"
        elif self.task == "kv":
            task = f"kv@{settings.sampler}"
        return (
            f"{task}/{self.mechanism}/d{self.depth}/{self.init}/s{self.seed}/"
            f"n{settings.steps}/b{settings.batch}/lr{settings.lr:g}/w{settings.window}"
            + ("" if precision == "fp32" else f"/{precision}")
        )
