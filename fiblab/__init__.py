"""fiblab: a laboratory for depth-staggered Fibonacci sparse attention.

This package is the top layer: the ``fiblab`` command (`fiblab.cli`), the notebook widgets
(`fiblab.ui`), the run launcher (`fiblab.launch`) and the public API below, re-exported from
the layers it sits on (bottom to top: `lab` the core, `probes`, `analysis`)::

    import fiblab
    model = fiblab.build_model("paper-60m", schedule="stagger")
    out = fiblab.sparse_attention(q, k, v, alpha=0.8, window=8)

Names are imported on first use, so ``import fiblab`` stays cheap (no torch until needed).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"  # the one place it is written: pyproject.toml reads it from here

# public name -> the module that defines it
API_MODULES = {
    "build_model": "lab.model",
    "config_for": "lab.model",
    "ModelConfig": "lab.model",
    "FibLM": "lab.model",
    "save_pretrained": "lab.pretrained",
    "from_pretrained": "lab.pretrained",
    "load_tokenizer": "lab.pretrained",
    "PRESETS": "lab.model",
    "sparse_attention": "lab.attention",
    "column_plan": "lab.attention",
    "plan_for": "lab.plan",
    "ColumnPlan": "lab.plan",
    "attended_distances": "lab.offsets",
    "layer_sets": "lab.plan",
    "fibonacci": "lab.offsets",
    "layer_alphas": "lab.schedules",
    "Store": "lab.store",
    "TrainConfig": "lab.trainconfig",
    "make_config": "lab.trainconfig",
    "train": "lab.train",
    "evaluate_run": "lab.evalrun",
    "coverage": "probes.coverage",
    "run_grid": "probes.retrieval",
    "build_report": "analysis.results",
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
