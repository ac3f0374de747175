"""Notebook widgets: the wiring between ipywidgets and the lab's modules.

    lab.ui.coverage   CoverageExplorer (notebook 01) and the pure `explore` step
    lab.ui.probes     ProbePanel (notebook 02) over probes.retrieval
    lab.ui.train      TrainPanel (notebook 03) over lab.launch
    lab.ui.common     paths, FIBLAB_SMOKE, errors shown in the UI, PNG figures
    lab.ui.nbstrip    strip notebooks for committing (`make strip-notebooks`)

Nothing is imported here, so `import lab.ui.coverage` does not pull in torch.
"""
