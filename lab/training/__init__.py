"""Training: the paper's recipe, exactly resumable (`train`), its configuration and presets
(`trainconfig`), checkpoints that survive a kill (`checkpoint`), a run's data (`rundata`), what
the process is doing now (`runphase`), and live scalar logging (`runlog`, `tblog`,
`runlog_replay`).
"""
