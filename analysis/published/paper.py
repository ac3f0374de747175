"""The paper's published numbers, as shipped in ``analysis/reference/``.

The five tables of *Depth-Staggered Fibonacci Spacing for Sparse Attention* were transcribed to
CSV, and the authors' two result dumps (``lenextrap.json``, ``posloss.json``) are kept verbatim,
so a clone of this project can compare its results with the paper without the authors' files.
Every loader returns a fresh DataFrame.

Tables (``paper_table(n)`` returns table ``n``; each also has a named loader):

1. :func:`perplexity` — held-out perplexity at step 13,000, 21 runs × 4 validation sets.
2. :func:`retrieval_probe` — the marked two-distance probe: learned α range and accuracy.
3. :func:`length_extrapolation` — FineWeb-Edu perplexity at 1×, 2× and 4× the training length.
4. :func:`position_nll` — FineWeb-Edu NLL in 8 position bins, W = 8.
5. :func:`seeds_w12` — FineWeb-Edu perplexity over seeds at W = 12.

Dumps: :func:`lenextrap` (all 21 runs plus dense, two datasets) and :func:`posloss` (per-position
and binned NLL, 21 runs × 4 datasets), both in long format.

Naming: ``base`` is ``fib`` (Fibonacci ladder) or ``pow2`` (the power-of-2 "logsparse" base);
``schedule`` is ``fixed``, ``learned``, ``stagger`` or ``coprime`` (the authors' "HDC"); ``W`` is
the local window. Tables 3–5 write a configuration as ``"base/schedule"`` (e.g.
``"fib/stagger"``), as the paper does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from analysis.published.paperdb import DATASETS, parse_title

__all__ = [
    "REFERENCE_DIR",
    "TABLE_FILES",
    "paper_table",
    "perplexity",
    "retrieval_probe",
    "length_extrapolation",
    "position_nll",
    "seeds_w12",
    "lenextrap",
    "posloss",
]

#: Where the published tables live (inside the package, so clones and installs have them).
REFERENCE_DIR = Path(__file__).resolve().parents[1] / "reference"  # analysis/reference

#: Table number → file name in :data:`REFERENCE_DIR`.
TABLE_FILES = {
    1: "table1_perplexity.csv",
    2: "table2_retrieval_probe.csv",
    3: "table3_length_extrapolation.csv",
    4: "table4_position_nll.csv",
    5: "table5_seeds_w12.csv",
}

_DTYPES = {
    1: {"base": "str", "schedule": "str", "W": "int64"},
    2: {"depth": "int64", "init": "str"},
    3: {"model": "str", "W": "Int64"},
    4: {"schedule": "str", "W": "int64"},
    5: {"config": "str"},
}


def _read_csv(n: int) -> pd.DataFrame:
    path = REFERENCE_DIR / TABLE_FILES[n]
    if not path.is_file():
        raise FileNotFoundError(f"the paper's table {n} is missing: {path}")
    df = pd.read_csv(path, dtype=_DTYPES[n])
    for col in df.columns:
        if col not in _DTYPES[n]:
            df[col] = df[col].astype(float)
    return df


def perplexity() -> pd.DataFrame:
    """Table 1: held-out perplexity of the 21 main-matrix runs (seed 42) at step 13,000.

    Columns: ``base`` (``fib`` | ``pow2``), ``schedule`` (``fixed`` | ``learned`` | ``stagger`` |
    ``coprime``), ``W`` (int: 6, 8, 10, 12), then perplexity on the four validation sets
    ``tinystories``, ``math``, ``fineweb_edu``, ``wikipedia`` (floats, 2 decimals as published).
    Rows in the paper's order: fib fixed, learned, stagger, coprime (W = 6…12 each), then pow2
    fixed (W = 8 only) and pow2 stagger (W = 6…12).
    """
    return _read_csv(1)


def retrieval_probe() -> pd.DataFrame:
    """Table 2: the marked two-distance shift-copy probe (distances 200 and 350, T = 512).

    Columns: ``depth`` (int: 2, 4, 8), ``init`` (``uniform`` α = 1 or ``staggered``),
    ``learned_alpha_min`` / ``learned_alpha_max`` (the range of the final learned α over layers
    and seeds), ``acc_at_200`` / ``acc_at_350`` (accuracy at each distance, mean over seeds 0, 1).
    """
    return _read_csv(2)


def length_extrapolation() -> pd.DataFrame:
    """Table 3: FineWeb-Edu perplexity when a model trained at T = 1024 is evaluated longer.

    Columns: ``model`` (``dense`` or ``base/schedule``), ``W`` (nullable int; missing for dense),
    ``ppl_T1024``, ``ppl_T2048``, ``ppl_T4096``, ``change_at_4x_percent`` (the percentage change
    from T = 1024 to T = 4096, as published: integer for dense, one decimal otherwise).
    """
    return _read_csv(3)


def position_nll() -> pd.DataFrame:
    """Table 4: FineWeb-Edu NLL (nats) by position within the 1024-token window, W = 8.

    Columns: ``schedule`` (``base/schedule``: ``fib/fixed``, ``fib/stagger``), ``W`` (int),
    ``b0`` … ``b7`` — the mean NLL over 8 position bins, ``b0`` the earliest positions
    (bin edges 0, 127, 255, …, 1023).
    """
    return _read_csv(4)


def seeds_w12() -> pd.DataFrame:
    """Table 5: FineWeb-Edu perplexity over training seeds at W = 12.

    Columns: ``config`` (``base/schedule``), ``seed42``, ``seed43``, ``seed44`` (``NaN`` where a
    seed was not run: fib/learned has no seed 44), ``mean`` and ``std`` over the available seeds
    (the population standard deviation, ddof = 0).
    """
    return _read_csv(5)


_LOADERS = {
    1: perplexity,
    2: retrieval_probe,
    3: length_extrapolation,
    4: position_nll,
    5: seeds_w12,
}


def paper_table(n: int) -> pd.DataFrame:
    """Published table ``n`` (1–5); see the module docstring for what each holds."""
    if n not in _LOADERS:
        raise ValueError(f"the paper has tables 1-5, got {n!r}")
    return _LOADERS[n]()


def _read_json(name: str):
    path = REFERENCE_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"the authors' dump is missing: {path}")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _variant_columns(run: str) -> dict:
    v = parse_title(run)
    return {
        "run": run,
        "code": v["code"],
        "base": v["base"],
        "schedule": v["schedule"],
        "W": v["W"],
    }


def lenextrap() -> pd.DataFrame:
    """The authors' length-extrapolation dump (``lenextrap.json``) in long format.

    One row per run, evaluation length and dataset. Columns: ``run`` (the run title, e.g.
    ``f13__fib_stagger_w12``; ``ref_e0000`` is the dense baseline), ``code``, ``base``,
    ``schedule``, ``W`` (parsed from the title; missing for the dense reference), ``length``
    (int: 1024, 2048, 4096), ``dataset`` (``fineweb_edu`` | ``wikipedia``), ``ppl``.
    Table 3 is a subset of it (FineWeb-Edu).
    """
    rows = []
    for run, by_length in _read_json("lenextrap.json").items():
        head = _variant_columns(run)
        for length, by_dataset in by_length.items():
            for dataset, ppl in by_dataset.items():
                rows.append(
                    {
                        **head,
                        "length": int(length),
                        "dataset": DATASETS.get(dataset, dataset),
                        "ppl": float(ppl),
                    }
                )
    df = pd.DataFrame(rows)
    df["W"] = df["W"].astype("Int64")
    return df


def posloss(binned: bool = True) -> pd.DataFrame:
    """The authors' position-resolved loss dump (``posloss.json``) in long format.

    ``binned=True``: one row per run, dataset and bin; columns ``run``, ``code``, ``base``,
    ``schedule``, ``W``, ``dataset`` (``tinystories`` | ``math`` | ``fineweb_edu`` |
    ``wikipedia``), ``bin`` (0–7, 0 the earliest positions), ``nll`` (nats). Table 4 is a subset.

    ``binned=False``: one row per run, dataset and position; ``position`` (0–1022) is the index
    of the query token in the 1024-token window, so its ``nll`` is the loss of predicting token
    ``position + 1`` from the ``position + 1`` tokens before it (mean over 488 windows).
    """
    rows = []
    key, col = ("binned", "bin") if binned else ("per_position", "position")
    for run, by_dataset in _read_json("posloss.json").items():
        head = _variant_columns(run)
        for dataset, record in by_dataset.items():
            name = DATASETS.get(dataset, dataset)
            rows.extend(
                {**head, "dataset": name, col: i, "nll": float(v)}
                for i, v in enumerate(record[key])
            )
    df = pd.DataFrame(rows)
    df["W"] = df["W"].astype("Int64")
    return df
