"""Notebook widgets: the wiring between ipywidgets and the lab's modules.

    fiblab.ui.coverage   CoverageExplorer (notebook 01) and the pure `explore` step
    fiblab.ui.probes     ProbePanel (notebook 02) over probes.retrieval
    fiblab.ui.train      TrainPanel (notebook 03) over fiblab.launch
    fiblab.ui.common     paths, FIBLAB_SMOKE, errors shown in the UI, PNG figures
    fiblab.ui.nbstrip    strip notebooks for committing (`make strip-notebooks`)

Nothing is imported here, so `import fiblab.ui.coverage` does not pull in torch.
"""
