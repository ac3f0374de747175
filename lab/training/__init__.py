"""Training: the loop of the paper's recipe, exactly resumable (`train`), and what watches a run
at named moments (`watch`: store, live sink, bar, phase, CPU share); the configuration and
presets (`trainconfig`), AdamW's groups and the LR schedule (`optim`), one process or N under
torchrun (`distributed`), stop requests (`stop`), checkpoints that survive a kill
(`checkpoint`), loading a run's data (`dataload`), the phase file saying what the process is
doing now (`phases`), live scalar sinks (`sinks`; TensorBoard in `tblog`) and the store's rows
replayed into them (`replay`).
"""
