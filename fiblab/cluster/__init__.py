"""Ray: connecting to a cluster and sizing tasks (`ray_cluster`), probe grids, LM sweeps and
single runs as tasks with the driver alone writing the store (`ray_run`), the schedule search's
trials (`ray_search`), a sweep's TOML (`sweepspec`) and what a sweep prints (`ray_progress`).
"""
