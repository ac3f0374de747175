"""Detached jobs a notebook or the CLI starts and can leave: a training run (`launch`), a probe
grid (`probe_launch`), a schedule search (`search_launch`), each a process of its own session
(`detached`: the `Handle` they share) watched through the store and its live files, stopped and resumed; the command
line and process count of a training launch (`train_process`), how long it would take here
(`train_estimate`) and how long it still takes (`train_eta`, `probe_progress`).
"""
