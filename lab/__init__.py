"""The core: the attended set (`ladder`), column attention (`kernels`, `sparse`), the language
model (`lm`), its data (`data`), training (`training`), the experiment store (`store`),
evaluations (`evaluation`), models out (`publish`), what it all costs (`cost`), the machine it
runs on (`machine`) and small helpers (`util`).  Nothing here imports probes, analysis or fiblab.
"""
