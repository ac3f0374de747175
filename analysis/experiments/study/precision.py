"""The one precision a study computes in: resolved when it starts, recorded beside its runs
(``<scale>-precision.json``), and kept when the study is continued on a machine whose ``auto``
answers otherwise — as ``--resume`` keeps a run's — so no comparison of the study mixes fp32
and bf16 runs (`analysis.experiments.study.study`)."""

from __future__ import annotations

import json
import os

#: The precision the study started in, kept beside the runs so a continued study keeps it.
PRECISION_FILE = "precision.json"


def study_precision(runs_dir: str, prefix: str, asked: str = "auto", log=print) -> str:
    """The precision every run of study `prefix` computes in: the one recorded when it started
    (``<prefix>-precision.json`` in runs_dir), else that of a run it already trained (a study
    from before the record), else `asked` resolved on this machine — then recorded."""
    from lab.machine.hardware import machine
    from lab.machine.precision import resolve_precision
    from lab.training.checkpoint import latest_good_checkpoint

    path = os.path.join(runs_dir, f"{prefix}-{PRECISION_FILE}")
    here = resolve_precision(asked, "cpu")
    try:
        with open(path) as f:
            was = json.load(f)
    except (OSError, ValueError):
        was = None
    if was is None:
        for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
            if name.startswith(f"{prefix}-") and os.path.isdir(os.path.join(runs_dir, name)):
                ck = latest_good_checkpoint(os.path.join(runs_dir, name), lambda *a: None)
                if ck is not None and ck.get("precision"):
                    was = {"precision": ck["precision"], "machine": f"its run {name}"}
                    break
    if was is None:
        was = {"precision": here, "machine": machine().line()}
    elif was["precision"] != here:
        log(
            f"   precision: continuing in {was['precision']}, the precision this study started "
            f"in ({was['machine']}); --precision {asked} would be {here} here, and one study "
            f"never mixes precisions"
        )
    os.makedirs(runs_dir, exist_ok=True)
    with open(path, "w") as f:
        json.dump(was, f)
    return was["precision"]
