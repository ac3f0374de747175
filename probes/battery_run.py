"""The RULER / LEGO / associative-recall battery on a trained run: every task scored, tested against chance, stored.

`score_run` loads a run folder's newest good checkpoint (no training data is read) and runs
`probes.battery.run_battery` on it at its own vocabulary; `rows_of` turns the battery's report
into one `BatteryRow` per task: the accuracy over all the task's items, the count correct, the
forced-choice chance rate and the one-sided binomial test of "accuracy > chance"
(``scipy.stats.binomtest``, alternative "greater").  A task whose p-value is at least `ALPHA`
is labelled *at chance*: the model was not shown to beat guessing, which is a label on the
result and never counts as a claim that held.

`log_rows` writes the rows with ``Store.log_battery``, keyed by (run, task, n, seed), so scoring
the same run, n and seed again replaces its rows; `fiblab battery` and the demo's LM stage both
write through it.

    rb = score_run("runs/cpu-stagger", n=100, seed=0)
    with Store("runs/fiblab.db") as st:
        ensure_run(st, rb)
        log_rows(st, rb.name, rb.rows)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lab.util.checks import nonneg_int, positive_int
from probes.battery import ASSOC_PAIRS, HOPS, LEGO_LENGTHS, N_DISTRACTORS, run_battery

#: Bump when the battery's items or scoring change, so stored results say which they came from.
BATTERY_VERSION = 1
#: The level of the one-sided binomial test below which a task is "above chance".
ALPHA = 0.05
#: The battery's tasks, in the order `run_battery` reports them.
TASKS = ("ruler_vt", "lego", "assoc_recall")


@dataclass(frozen=True)
class BatteryRow:
    """One task's battery result on one run (what ``Store.log_battery`` stores)."""

    task: str
    n: int  # items per chain length
    seed: int
    step: int  # the checkpoint's step
    items: int  # all the task's items (n per chain length)
    correct: int
    accuracy: float  # correct / items
    chance: float  # the forced-choice rate
    p_value: float  # P(X >= correct), X ~ Binomial(items, chance)
    at_chance: bool  # p_value >= ALPHA: not shown above chance
    version: int = BATTERY_VERSION
    settings: dict = field(default_factory=dict)
    by_length: dict = field(default_factory=dict)  # {"h2": acc, …} / {"L2": acc, …}


@dataclass(frozen=True)
class RunBattery:
    """The battery's rows for one run folder."""

    name: str
    run_dir: str
    step: int
    config: object  # lab.training.trainconfig.TrainConfig
    rows: list


def settings(
    vocab_size: int,
    *,
    hops: Sequence[int] = HOPS,
    lengths: Sequence[int] = LEGO_LENGTHS,
    n_distractors: int = N_DISTRACTORS,
    pairs: Sequence[int] = ASSOC_PAIRS,
    first_id: int = 0,
    seq_len: int | None = None,
) -> dict:
    """What a battery result depends on besides (n, seed): the arguments of `run_battery`."""
    return {
        "version": BATTERY_VERSION,
        "vocab_size": int(vocab_size),
        "hops": [int(h) for h in hops],
        "lengths": [int(L) for L in lengths],
        "n_distractors": int(n_distractors),
        "pairs": [int(p) for p in pairs],
        "first_id": int(first_id),
        "seq_len": seq_len,
        "alpha": ALPHA,
    }


def chance_test(correct: int, items: int, chance: float) -> tuple[float, bool]:
    """(p-value, at chance) of the one-sided binomial test of accuracy > chance."""
    from scipy.stats import binomtest

    p = float(binomtest(int(correct), int(items), float(chance), alternative="greater").pvalue)
    return p, p >= ALPHA


def rows_of(report: Mapping, n: int, seed: int, step: int, config: Mapping) -> list[BatteryRow]:
    """One `BatteryRow` per task of a `run_battery` report (none for a skipped battery).

    The count correct is summed per chain length (each cell's accuracy is k / n, rounded to
    float32 by the battery: the counts are recovered exactly for any n below 2**24)."""
    if "skipped" in report:
        return []
    rows = []
    for task in (t for t in TASKS if t in report):  # a report made before recall has two
        r = report[task]
        counts = {
            k.removeprefix("acc_"): round(v * n) for k, v in r.items() if k.startswith("acc_")
        }
        cells = {k: c / n for k, c in counts.items()}  # exact k / n (the battery's is float32)
        correct = sum(counts.values())
        items = int(r["n"])
        if items != n * len(cells):
            raise ValueError(
                f"battery report for {task} has {items} items, not n={n} × {len(cells)} "
                f"chain lengths: pass the n it was run with"
            )
        p, at = chance_test(correct, items, r["chance"])
        rows.append(
            BatteryRow(
                task=task,
                n=int(n),
                seed=int(seed),
                step=int(step),
                items=items,
                correct=int(correct),
                accuracy=correct / items,
                chance=float(r["chance"]),
                p_value=p,
                at_chance=at,
                settings=dict(config),
                by_length=cells,
            )
        )
    return rows


def score_run(run_dir: str, n: int = 100, seed: int = 0, device="cpu") -> RunBattery:
    """The battery on a run folder's newest good checkpoint, at the run's own vocabulary and
    each item's own length; a ValueError naming the fix for n < 1, seed < 0, a folder without
    a checkpoint or a model too short for the items."""
    from lab.publish.export import run_model

    positive_int(n, "n", "items per chain length: pass --n 100")
    nonneg_int(seed, "seed", "pass --seed 0")
    r = run_model(run_dir, device, log=lambda *a: None)
    vocab = r.config.model.vocab_size
    report = run_battery(r.model, vocab, n=n, seed=seed, device=device)
    rows = rows_of(report, n, seed, r.step, settings(vocab))
    return RunBattery(r.name, run_dir, r.step, r.config, rows)


def ensure_run(store, rb: RunBattery) -> None:
    """Register a run the store does not hold yet (a run folder trained without this store),
    as ``fiblab eval`` does: done when its checkpoint is at the configured last step."""
    from lab.store.connection import UnknownRunError

    try:
        store.config(rb.name)
    except UnknownRunError:
        cfg = rb.config
        store.start_run(
            rb.name,
            cfg.to_dict(),
            kind="lm",
            preset=getattr(cfg, "preset", "") or None,
            seed=cfg.seed,
            run_dir=rb.run_dir,
        )
        done = rb.step >= cfg.steps
        store.set_status(
            rb.name,
            "done" if done else "pending",
            None if done else f"registered by fiblab battery at step {rb.step} of {cfg.steps}",
        )


def log_rows(store, run: str, rows: Sequence[BatteryRow]) -> int:
    """Write the rows under ``run`` (which the store must hold); returns how many."""
    for row in rows:
        store.log_battery(run, row)
    return len(rows)
