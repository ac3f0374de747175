"""`fiblab demo --scale study`: the study's runs (`study`), its settings and decisions as pure
functions (`plan`), the one precision it computes in (`precision`), its report (`report`) and
each compared run's per-window NLL (`windows`).
"""
