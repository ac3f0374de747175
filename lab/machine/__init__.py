"""The machine: what it has (`hardware`), the compute precision that follows it (`precision`),
implementation choices measured once per machine and shape (`autotune`), the timing harness
every measurement uses (`measure`) and how busy the machine was meanwhile (`contention`), its
cores shared by the lab's jobs (`cpu_share`), and whether a process is alive (`procs`).
"""
