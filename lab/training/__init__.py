"""Training: the paper's recipe, exactly resumable (`train`), its configuration and presets
(`trainconfig`), AdamW's groups and the LR schedule (`optim`), one process or N under torchrun
(`distributed`), stop requests (`stop`), checkpoints that survive a kill (`checkpoint`), a run's
data (`rundata`), what the process is doing now (`runphase`), and live scalar logging
(`runlog`, `tblog`, `runlog_replay`).
"""
