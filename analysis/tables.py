"""The paper's tables 1–5 rebuilt from results, and side-by-side comparison with the published ones.

This module gathers the public names of the modules that define them, so that
``from analysis import tables; tables.table1(...)`` keeps working. Each table has a pure builder
from a long frame and thin readers, from *our* experiment store (:class:`lab.store.Store`, read by
:mod:`analysis.tables_store`) or from the paper's own frames (the authors' ``fib.db`` through
:mod:`analysis.paperdb`, their ``lenextrap`` / ``posloss`` dumps through :mod:`analysis.paper`)::

    table  defined in                from our store        from the paper's frames
    1      analysis.tables_ppl       table1_from_store     table1 (paperdb.load_final_ppl)
    2      analysis.tables_probe     table2_from_store     table2_from_paperdb (load_retrieval)
    3      analysis.tables_length    table3_from_store     table3_from_lenextrap (paper.lenextrap)
    4      analysis.tables_position  table4_from_store     table4_from_posloss (paper.posloss)
    5      analysis.tables_seeds     table5_from_store     table5_from_final_ppl (load_final_ppl)

`analysis.tables_paper` puts the published numbers beside ours (``with_paper``, ``published``);
`analysis.tables_rows` holds what every table's rows share (labels, the paper's order, the
``variant`` column). Only the seeds of one variant (:mod:`lab.variant`) are averaged; runs that
differ in anything else are rows of their own, duplicates of one variant and seed are resolved and
noted in ``attrs["notes"]`` (:mod:`analysis.comparable`), and a table that cannot be built raises
:class:`TableUnavailable` (why, and what to run).
"""

from __future__ import annotations

from .comparable import TableUnavailable
from .tables_length import table3, table3_from_lenextrap, table3_from_store
from .tables_paper import published, with_paper
from .tables_position import table4, table4_from_posloss, table4_from_store
from .tables_ppl import TABLE1_COLUMNS, TABLE1_KEYS, table1, table1_from_store
from .tables_probe import (
    probe_cells_from_paperdb,
    probe_cells_from_records,
    probe_cells_from_store,
    table2,
    table2_from_paperdb,
    table2_from_store,
)
from .tables_rows import config_label
from .tables_seeds import table5, table5_from_final_ppl, table5_from_store
from .tables_store import EVAL_KINDS, final_step_rows, lm_evals, lm_runs

__all__ = [
    "TABLE1_KEYS",
    "TABLE1_COLUMNS",
    "EVAL_KINDS",
    "table1",
    "with_paper",
    "published",
    "TableUnavailable",
    "config_label",
    "lm_runs",
    "lm_evals",
    "final_step_rows",
    "table1_from_store",
    "probe_cells_from_store",
    "probe_cells_from_records",
    "probe_cells_from_paperdb",
    "table2",
    "table2_from_store",
    "table2_from_paperdb",
    "table3",
    "table3_from_store",
    "table3_from_lenextrap",
    "table4",
    "table4_from_store",
    "table4_from_posloss",
    "table5",
    "table5_from_store",
    "table5_from_final_ppl",
]
