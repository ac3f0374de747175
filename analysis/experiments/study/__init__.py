"""`fiblab demo --scale study`: the study's runs (`study`), its settings and decisions as pure
functions (`plan`), the one precision it computes in (`precision`), its report (`report`) and
each compared run's per-window NLL (`windows`), the runner that trains one run (`runner`).

The registered studies that decide the paper's claims on runs no analysis has seen, each frozen
by the one registration writer (`registration`) before its runs: the confirmation (`confirm`),
the scale study (`scale`: its protocol `scale_protocol`, side studies on the confirmation's
checkpoints `scale_probes`, verdicts and report `scale_verdicts`), and the two on fresh battery
items (`recall_fresh`: recall above chance; `battery_fresh`: each task at chance, by
equivalence), which share their registration, scoring and command line (`fresh`).
"""
