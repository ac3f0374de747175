"""The lists the parser offers as choices and defaults, importable without torch.

`fiblab --help` builds every subparser, so these cannot come from the modules that define
them where those import torch (`probes.settings`, `lab.efficiency`, `lab.model`,
`lab.evaluate`); they are derived from the light registries where one exists (`lab.schemes`,
`lab.evalkind`) and tests/test_cli_help.py checks that each equals the lab's own.
"""

from __future__ import annotations

from lab.evalkind import POLICY_FAMILY
from lab.schemes import SCHEMES as _ALL

#: probes.settings.MECHANISMS: the retrieval probe's mechanisms
MECHANISMS: tuple[str, ...] = ("dense", "fib-fixed", "pow2", "fib-stagger", "learned", "blur")
#: lab.efficiency.SCHEMES: every scheme that is a model (blur is the probes' gather only)
EFFICIENCY_SCHEMES: tuple[str, ...] = tuple(s.short for s in _ALL if s.name != "blur")
#: lab.model.RUNG_POLICIES: the rung set at longer lengths
RUNG_POLICIES: tuple[str, ...] = tuple(POLICY_FAMILY)
#: lab.evaluate.DEFAULT_FACTORS: evaluation lengths, as multiples of the training length
DEFAULT_FACTORS: tuple[int, ...] = (1, 2, 4, 8)
