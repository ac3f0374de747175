"""The machine: what it has (`hardware`), the compute precision that follows it (`precision`),
implementation choices measured once per machine and shape (`autotune`), its cores shared by the
lab's jobs (`cpu_share`), and whether a process is alive (`procs`).
"""
