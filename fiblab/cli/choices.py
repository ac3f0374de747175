"""The lists the parser offers as choices and defaults, importable without torch.

`fiblab --help` builds every subparser, so these cannot come from the modules that define
them where those import torch (`probes.settings`, `lab.cost.efficiency`,
`lab.evaluation.evaluate`); they are derived from the light registries where one exists
(`lab.ladder.schemes`) or imported from torch-free ones (`lab.lm.modelconfig.RUNG_POLICIES`),
and tests/fiblab/test_cli_help.py checks that each equals the lab's own.
"""

from __future__ import annotations

from lab.ladder.schemes import SCHEMES as _ALL

#: probes.settings.MECHANISMS: the retrieval probe's mechanisms
MECHANISMS: tuple[str, ...] = ("dense", "fib-fixed", "pow2", "fib-stagger", "learned", "blur")
#: lab.cost.efficiency.MODEL_SCHEMES: every scheme that is a model (blur is the probes' gather only)
EFFICIENCY_SCHEMES: tuple[str, ...] = tuple(s.short for s in _ALL if s.name != "blur")
#: lab.evaluation.evaluate.DEFAULT_FACTORS: evaluation lengths, as multiples of the training length
DEFAULT_FACTORS: tuple[int, ...] = (1, 2, 4, 8)
