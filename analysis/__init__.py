"""Analysis on the core and the probes: the paper's tables (`tables`) beside its own numbers
(`published`), statistics (`statistics`), the claims ledger (`ledger`), figures and reports
(`figures`, `reports`), and the experiments that train models to feed them (`experiments`:
the main job, the study, the schedule search).
"""
