"""fiblab: a laboratory for depth-staggered Fibonacci sparse attention.

This package is the top layer: the ``fiblab`` command (`fiblab.cli`), the notebook widgets
(`fiblab.ui`), the run launcher (`fiblab.jobs.launch`) and the public API below, re-exported from
the layers it sits on (bottom to top: `lab` the core, `probes`, `analysis`)::

    import fiblab
    model = fiblab.build_model("paper-60m", schedule="stagger")
    out = fiblab.sparse_attention(q, k, v, alpha=0.8, ladder=fiblab.Ladder(8))

Names are imported on first use, so ``import fiblab`` stays cheap (no torch until needed).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"  # the one place it is written: pyproject.toml reads it from here

# public name -> the module that defines it
API_MODULES = {
    "build_model": "lab.lm.model",
    "config_for": "lab.lm.modelconfig",
    "ModelConfig": "lab.lm.modelconfig",
    "FibLM": "lab.lm.model",
    "save_pretrained": "lab.publish.pretrained",
    "from_pretrained": "lab.publish.pretrained",
    "load_tokenizer": "lab.publish.pretrained",
    "PRESETS": "lab.lm.modelconfig",
    "sparse_attention": "lab.sparse.attention",
    "plan_for": "lab.ladder.plan",
    "ColumnPlan": "lab.ladder.plan",
    "attended_distances": "lab.ladder.plan",
    "Ladder": "lab.ladder.offsets",
    "layer_sets": "lab.ladder.plan",
    "fibonacci": "lab.ladder.offsets",
    "layer_alphas": "lab.ladder.schedules",
    "Store": "lab.store",
    "TrainConfig": "lab.training.trainconfig",
    "make_config": "lab.training.trainconfig",
    "train": "lab.training.train",
    "evaluate_run": "lab.evaluation.evalrun",
    "coverage": "probes.coverage",
    "run_grid": "probes.grid",
    "build_report": "analysis.reports.results",
}
__all__ = sorted(API_MODULES)


def __getattr__(name: str):
    if name not in API_MODULES:
        raise AttributeError(f"module 'fiblab' has no attribute {name!r}")
    value = getattr(importlib.import_module(API_MODULES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(API_MODULES))
