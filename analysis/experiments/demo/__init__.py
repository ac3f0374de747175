"""The main job (`fiblab demo`): the paper's questions at lab scale (`job`), its results as the
ledger's evidence (`evidence`), its report (`report`) and what a second run reuses (`reuse`).
"""
